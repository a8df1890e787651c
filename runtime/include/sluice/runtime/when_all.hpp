#pragma once
// when_all: run tasks concurrently on the current executor and wait for all of them.
//
// Results come back in argument order (void becomes std::monostate). If a task throws, its
// siblings are asked to stop (through their stop token), all are joined, and the first exception
// is rethrown. A stop of the awaiting task is forwarded to every child.
//
//   auto [a, b] = co_await when_all(fetch_a(), fetch_b());

#include <sluice/runtime/detail/group.hpp>

#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::runtime {

namespace detail {
template <class T>
group_child when_all_child(task<T> t, std::optional<value_or_monostate<T>>* out, group* g) {
  auto result = co_await settle_at_home(std::move(t), &g->home());
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
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (detail::when_all_child(std::move(tasks), &std::get<I>(results), &g).start_in(g), ...);
  }(std::index_sequence_for<Ts...>{});
  co_await g.join();
  g.rethrow_if_failed();
  co_return std::apply([](auto&... r) { return std::tuple<detail::value_or_monostate<Ts>...>(std::move(*r)...); },
                       results);
}

template <class T>
task<std::vector<detail::value_or_monostate<T>>> when_all(std::vector<task<T>> tasks) {
  detail::group g;
  g.link(co_await current_stop_token());
  std::vector<std::optional<detail::value_or_monostate<T>>> results(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) detail::when_all_child(std::move(tasks[i]), &results[i], &g).start_in(g);
  co_await g.join();
  g.rethrow_if_failed();
  std::vector<detail::value_or_monostate<T>> out;
  out.reserve(results.size());
  for (auto& r : results) out.push_back(std::move(*r));
  co_return out;
}

}  // namespace sluice::runtime
