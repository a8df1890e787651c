#pragma once
// when_all: run tasks concurrently on the current executor and wait for all of them.
//
// Results come back in argument order (void becomes std::monostate). If a task throws, its
// siblings are asked to stop (through their stop token), all are joined, and the first exception
// is rethrown. A stop of the awaiting task is forwarded to every child.
//
//   auto [a, b] = co_await when_all(fetch_a(), fetch_b());

#include <sluice/runtime/detail/group.hpp>

#include <exception>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::runtime {

namespace detail {
template <class T>
group_child when_all_child(task<outcome<T>> settled, std::optional<value_or_monostate<T>>* out, group* g) {
  auto result = co_await std::move(settled);
  if (result.error) {
    g->fail(result.error);
  } else {
    *out = std::move(result.value);
  }
}
}  // namespace detail

template <class... Ts>
task<std::tuple<detail::value_or_monostate<Ts>...>> when_all(task<Ts>... tasks) {
  detail::group g;
  g.link(co_await current_stop_token());
  std::tuple<std::optional<detail::value_or_monostate<Ts>>...> results;
  std::exception_ptr not_started;
  try {
    executor* home = executor::current();
    auto children = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple{detail::when_all_child(detail::settle_at_home(std::move(tasks), home), &std::get<I>(results), &g)...};
    }(std::index_sequence_for<Ts...>{});
    not_started = detail::start_children(children, g);
  } catch (...) {  // (out of memory for a child's frame: none started)
    not_started = std::current_exception();
  }
  co_await g.join();
  if (not_started) std::rethrow_exception(not_started);
  g.rethrow_if_failed();
  co_return std::apply([](auto&... r) { return std::tuple<detail::value_or_monostate<Ts>...>(std::move(*r)...); },
                       results);
}

template <class T>
task<std::vector<detail::value_or_monostate<T>>> when_all(std::vector<task<T>> tasks) {
  detail::group g;
  g.link(co_await current_stop_token());
  std::vector<std::optional<detail::value_or_monostate<T>>> results(tasks.size());
  std::exception_ptr not_started;
  try {
    executor* home = executor::current();
    std::vector<detail::group_child> children;
    children.reserve(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      children.push_back(detail::when_all_child(detail::settle_at_home(std::move(tasks[i]), home), &results[i], &g));
    }
    not_started = detail::start_children(children, g);
  } catch (...) {  // (out of memory for a child's frame: none started)
    not_started = std::current_exception();
  }
  co_await g.join();
  if (not_started) std::rethrow_exception(not_started);
  g.rethrow_if_failed();
  std::vector<detail::value_or_monostate<T>> out;
  out.reserve(results.size());
  for (auto& r : results) out.push_back(std::move(*r));
  co_return out;
}

}  // namespace sluice::runtime
