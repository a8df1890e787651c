#pragma once
// The values an etcd client sends and receives: key-values, range results, transaction compares and
// operations, leases, watch events and the server's status.
//
// Keys and values are byte strings (any bytes, NUL included); the client base64-encodes them for
// the gateway. Revisions, versions, lease ids and TTLs are etcd's int64s (member ids its uint64s).
// A field etcd leaves out of a response (proto3 omits zeros) reads as 0 / empty.
//
//   auto t = co_await c.txn({etcd::compare::mod_is("leader", etcd::compare::result::equal, rev)},
//                           {etcd::op::put("pointer", "chk-7")}, {etcd::op::range("leader")});

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::etcd {

struct key_value {
  std::string key, value;
  std::int64_t create_revision = 0;  // the revision that created the key (0: absent)
  std::int64_t mod_revision = 0;     // the revision of its last change
  std::int64_t version = 0;          // changes since its creation, 1 for a new key
  std::int64_t lease = 0;            // the lease it is attached to, or 0

  friend bool operator==(const key_value&, const key_value&) = default;
};

struct range_options {
  std::int64_t limit = 0;     // at most this many kvs (0: all); `more` says whether some were left
  std::int64_t revision = 0;  // read at this revision (0: the newest); compacted ones fail (OUT_OF_RANGE)
  bool count_only = false;    // only `count`, no kvs
  bool keys_only = false;     // kvs without values
};

struct range_response {
  std::int64_t revision = 0;  // the store's revision when the range was served
  std::vector<key_value> kvs;
  std::int64_t count = 0;     // keys in the range (also those left out by `limit`)
  bool more = false;          // `limit` left some out
};

// One compare of a transaction: key's `what` relates to `number` (or `value`) as `how`.
struct compare {
  enum class target { version, create, mod, value, lease };
  enum class result { equal, greater, less, not_equal };

  std::string key;
  target what = target::version;
  result how = result::equal;
  std::int64_t number = 0;  // version, create or mod revision, lease id
  std::string value;        // for target::value

  static compare version_is(std::string key, result how, std::int64_t version);
  static compare create_is(std::string key, result how, std::int64_t revision);
  static compare mod_is(std::string key, result how, std::int64_t revision);
  static compare value_is(std::string key, result how, std::string value);
  static compare lease_is(std::string key, result how, std::int64_t lease);
  // The key does not exist (its version is 0) / does exist.
  static compare missing(std::string key);
  static compare exists(std::string key);
};

// One operation of a transaction's success or failure branch.
struct op {
  enum class kind { put, range, del };

  kind what = kind::range;
  std::string key;
  std::string range_end;  // empty: just `key`; else the keys in [key, range_end)
  std::string value;      // put
  std::int64_t lease = 0; // put

  static op put(std::string key, std::string value, std::int64_t lease = 0);
  static op range(std::string key);
  static op range_prefix(std::string prefix);
  static op del(std::string key);
  static op del_prefix(std::string prefix);
};

struct txn_response {
  bool succeeded = false;     // every compare held: the success branch ran (else the failure branch)
  std::int64_t revision = 0;  // the store's revision after the transaction
  // One entry per operation of the branch that ran, in order: a range's kvs (empty for a put or a
  // delete, and for a range that matched nothing).
  std::vector<std::vector<key_value>> ranges;
  // One entry per operation of that branch: how many keys a delete removed (0 for the others).
  std::vector<std::int64_t> deleted;
};

struct lease {
  std::int64_t id = 0;
  std::int64_t ttl_seconds = 0;  // granted (the server may raise a too-short TTL to its minimum)
};

struct lease_ttl {
  std::int64_t ttl_seconds = 0;          // remaining; -1 when the lease has expired or is unknown
  std::int64_t granted_ttl_seconds = 0;  // as granted
};

struct watch_event {
  enum class kind { put, del };
  kind type = kind::put;
  key_value kv;  // for a delete: the key, its mod_revision (the delete's revision), no value
};

// The events of one watch response, all of one revision or a run of revisions in order.
struct watch_batch {
  std::int64_t revision = 0;  // the store's revision when the batch was sent
  std::vector<watch_event> events;
};

struct status_response {
  std::string version;           // "3.4.23"
  std::uint64_t member_id = 0;   // the member that answered
  std::uint64_t leader = 0;      // its view of the leader (0: none)
  std::uint64_t raft_term = 0;
  std::uint64_t raft_index = 0;
  std::int64_t revision = 0;
  std::int64_t db_size_bytes = 0;
  std::vector<std::string> errors;  // alarms the member reports (a healthy member has none)
};

}  // namespace sluice::etcd
