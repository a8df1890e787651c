// The JSON records the workers keep in etcd (cluster/src/attempt_record.hpp): each round-trips, and
// anything else in their keys (junk, a missing field, a wrong type, a leader outside the members)
// decodes to nothing rather than to a half-filled record. And a task's acknowledgement of a
// checkpoint, as a follower sends it and the leader reads it.

#include "attempt_record.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

using namespace sluice::cluster::detail;

TEST_CASE("cluster records: attempt, member and finished records round-trip") {
  attempt_record a;
  a.number = 4;
  a.epoch = 77;
  a.leader = 1;
  a.ports = {"10.0.0.1:7000", "10.0.0.2:7000"};
  a.member_revisions = {12, 15};
  a.newest_allowed = 9;
  a.first_free_id = 33;
  const std::optional<attempt_record> a2 = attempt_record::decode(a.encode());
  REQUIRE(a2.has_value());
  CHECK(a2->number == 4);
  CHECK(a2->epoch == 77);
  CHECK(a2->leader == 1);
  CHECK(a2->ports == a.ports);
  CHECK(a2->member_revisions == a.member_revisions);
  CHECK(a2->newest_allowed == 9);
  CHECK(a2->first_free_id == 33);

  const std::optional<member_record> m = member_record::decode(member_record{"h:1", 42, "fp"}.encode());
  REQUIRE(m.has_value());
  CHECK(m->port == "h:1");
  CHECK(m->pid == 42);
  CHECK(m->fingerprint == "fp");

  const std::optional<finished_record> f = finished_record::decode(finished_record{3, 21, "fp\nline 2"}.encode());
  REQUIRE(f.has_value());
  CHECK(f->attempt == 3);
  CHECK(f->checkpoint == 21);
  CHECK(f->fingerprint == "fp\nline 2");
}

TEST_CASE("cluster records: junk, missing fields, wrong types and a leader outside the members decode to nothing") {
  for (const char* text : {"", "null", "[]", "{", "{\"number\":1}", "not json at all"}) {
    INFO(text);
    CHECK_FALSE(attempt_record::decode(text).has_value());
    CHECK_FALSE(member_record::decode(text).has_value());
    CHECK_FALSE(finished_record::decode(text).has_value());
  }
  CHECK_FALSE(finished_record::decode(R"({"attempt":"3","checkpoint":1,"fingerprint":"x"})").has_value());
  CHECK_FALSE(member_record::decode(R"({"port":1,"pid":1,"fingerprint":"x"})").has_value());
  attempt_record a;
  a.ports = {"a:1", "b:1"};
  a.member_revisions = {1, 2};
  a.leader = 2;  // no worker 2
  CHECK_FALSE(attempt_record::decode(a.encode()).has_value());
  a.leader = 0;
  a.member_revisions = {1};  // ports and members disagree
  CHECK_FALSE(attempt_record::decode(a.encode()).has_value());
}

TEST_CASE("cluster records: an acknowledgement carries its state file's bases to the leader, and none when it has none") {
  sluice::snapshot::task_checkpoint_stats stats;
  stats.operator_state_bytes = 40;
  stats.channel_state_bytes = 5;
  stats.alignment_duration = std::chrono::nanoseconds(7);
  stats.sync_duration = std::chrono::nanoseconds(8);
  stats.write_duration = std::chrono::nanoseconds(9);
  stats.fsync_duration = std::chrono::nanoseconds(10);
  stats.switched_to_unaligned = true;
  stats.snapshot_started_at = std::chrono::steady_clock::now();  // this host's clock: not sent
  stats.state_file = sluice::snapshot::manifest_file{"", 300, 0xfeedbeef, 40, 5, {3, 6}};

  const std::string text = encode_acknowledgement(stats);
  CHECK(text.find("\"bases\":[3,6]") != std::string::npos);
  const auto back = decode_acknowledgement(text);
  REQUIRE(back.has_value());
  CHECK(back->operator_state_bytes == 40);
  CHECK(back->channel_state_bytes == 5);
  CHECK(back->alignment_duration == std::chrono::nanoseconds(7));
  CHECK(back->sync_duration == std::chrono::nanoseconds(8));
  CHECK(back->write_duration == std::chrono::nanoseconds(9));
  CHECK(back->fsync_duration == std::chrono::nanoseconds(10));
  CHECK(back->switched_to_unaligned);
  CHECK_FALSE(back->snapshot_started_at.has_value());
  REQUIRE(back->state_file.has_value());
  CHECK(*back->state_file == *stats.state_file);

  // A whole file: no "bases" key (what a worker of an older build sends), and it decodes as none.
  stats.state_file->bases.clear();
  const std::string whole = encode_acknowledgement(stats);
  CHECK(whole.find("bases") == std::string::npos);
  const auto whole_back = decode_acknowledgement(whole);
  REQUIRE(whole_back.has_value());
  REQUIRE(whole_back->state_file.has_value());
  CHECK(whole_back->state_file->bases.empty());
  CHECK(whole_back->state_file->size_bytes == 300);

  // Without a file description: none on the leader either.
  stats.state_file.reset();
  const auto bare = decode_acknowledgement(encode_acknowledgement(stats));
  REQUIRE(bare.has_value());
  CHECK_FALSE(bare->state_file.has_value());

  for (const char* junk : {"", "[]", "7", "{", R"({"op":"x"})", R"({"file":[]})", R"({"file":{"bases":"3"}})",
                           R"({"file":{"bases":[-1]}})"}) {
    INFO(junk);
    CHECK_FALSE(decode_acknowledgement(junk).has_value());
  }
}
