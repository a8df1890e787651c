// Factories of transaction compares and operations (see types.hpp).

#include <sluice/etcd/types.hpp>

#include "json.hpp"

#include <utility>

namespace sluice::etcd {

namespace {

compare numeric(std::string key, compare::target what, compare::result how, std::int64_t number) {
  compare c;
  c.key = std::move(key);
  c.what = what;
  c.how = how;
  c.number = number;
  return c;
}

op make_op(op::kind what, std::string key, std::string range_end) {
  op o;
  o.what = what;
  o.key = std::move(key);
  o.range_end = std::move(range_end);
  return o;
}

}  // namespace

compare compare::version_is(std::string key, result how, std::int64_t version) {
  return numeric(std::move(key), target::version, how, version);
}
compare compare::create_is(std::string key, result how, std::int64_t revision) {
  return numeric(std::move(key), target::create, how, revision);
}
compare compare::mod_is(std::string key, result how, std::int64_t revision) {
  return numeric(std::move(key), target::mod, how, revision);
}
compare compare::lease_is(std::string key, result how, std::int64_t lease) {
  return numeric(std::move(key), target::lease, how, lease);
}
compare compare::value_is(std::string key, result how, std::string value) {
  compare c = numeric(std::move(key), target::value, how, 0);
  c.value = std::move(value);
  return c;
}
compare compare::missing(std::string key) { return version_is(std::move(key), result::equal, 0); }
compare compare::exists(std::string key) { return version_is(std::move(key), result::greater, 0); }

op op::put(std::string key, std::string value, std::int64_t lease) {
  op o = make_op(kind::put, std::move(key), {});
  o.value = std::move(value);
  o.lease = lease;
  return o;
}
op op::range(std::string key) { return make_op(kind::range, std::move(key), {}); }
op op::range_prefix(std::string prefix) {
  auto [key, end] = detail::prefix_range(prefix);
  return make_op(kind::range, std::move(key), std::move(end));
}
op op::del(std::string key) { return make_op(kind::del, std::move(key), {}); }
op op::del_prefix(std::string prefix) {
  auto [key, end] = detail::prefix_range(prefix);
  return make_op(kind::del, std::move(key), std::move(end));
}

}  // namespace sluice::etcd
