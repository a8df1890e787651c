#pragma once
// when_any: run tasks concurrently; the first to finish wins, the others are stopped (through
// their stop token) and joined before the result is returned. Nothing is left running.
//
// `index` says which task won; `value` holds its result at that index (void becomes monostate).
// If the winner threw, the exception is rethrown after the losers have been joined.
//
//   auto r = co_await when_any(read_line(), sleep_task(1s));
//   if (r.index == 0) use(std::get<0>(r.value));

#include <sluice/runtime/detail/group.hpp>

#include <cstddef>
#include <exception>
#include <tuple>
#include <utility>
#include <variant>

namespace sluice::runtime {

template <class... Ts>
struct when_any_result {
  std::size_t index;
  std::variant<detail::value_or_monostate<Ts>...> value;
};

namespace detail {
template <class... Ts>
struct any_state {
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::size_t index = none;
  std::optional<std::variant<value_or_monostate<Ts>...>> value;
  std::exception_ptr error;
};

template <std::size_t I, class T, class State>
group_child when_any_child(task<outcome<T>> settled, State* state, group* g) {
  auto result = co_await std::move(settled);
  if (state->index == State::none) {
    if (result.error) {
      state->error = result.error;
    } else {
      state->value.emplace(std::in_place_index<I>, std::move(*result.value));
    }
    state->index = I;  // only once the result is in place
  } else if (result.error) {
    log_extra_child_failure(result.error);
  }
  g->request_stop();
}
}  // namespace detail

template <class... Ts>
task<when_any_result<Ts...>> when_any(task<Ts>... tasks) {
  static_assert(sizeof...(Ts) > 0, "when_any needs at least one task");
  detail::group g;
  g.link(co_await current_stop_token());
  detail::any_state<Ts...> state;
  std::exception_ptr not_started;
  try {
    executor* home = executor::current();
    auto children = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple{detail::when_any_child<I>(detail::settle_at_home(std::move(tasks), home), &state, &g)...};
    }(std::index_sequence_for<Ts...>{});
    not_started = detail::start_children(children, g);
  } catch (...) {  // (out of memory for a child's frame: none started)
    not_started = std::current_exception();
  }
  co_await g.join();
  if (not_started) std::rethrow_exception(not_started);
  if (state.error) std::rethrow_exception(state.error);
  co_return when_any_result<Ts...>{state.index, std::move(*state.value)};
}

}  // namespace sluice::runtime
