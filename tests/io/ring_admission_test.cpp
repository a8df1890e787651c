// Ring admission on the real io_uring (runtime/admission.hpp): an executor holding more idle TCP
// connections than its ring's wait share still writes, fsyncs and closes a file.

#include <sluice/runtime/sync_wait.hpp>

#include <support/idle_connections.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

using namespace sluice;

TEST_CASE("on io_uring, an executor with more idle TCP connections than its ring's wait share still writes and "
          "fsyncs a file",
          "[admission][tcp][file]") {
  test::temp_dir dir;
  runtime::executor_options o;
  o.uring.sq_entries = 16;
  o.uring.cq_entries = 32;  // 24 ordinary places, 21 for waits: 2 x 30 recvs and an accept are more
  const auto r = runtime::sync_wait(test::idle_connections_then_write(30, dir.file("state")), std::move(o));
  CHECK(r.outstanding_while_idle == 62);
  CHECK(r.file_done);
  CHECK(r.file_error.empty());
  CHECK(r.recvs_ended_before_file_done == 0);  // no peer had to do anything first
  CHECK(r.recvs_ended == 60);
  CHECK(r.contents == "checkpoint state");
}
