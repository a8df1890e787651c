#pragma once
// Waiting until a descriptor is ready: for a library that does its own non-blocking I/O on a socket
// it owns (libpq, a TLS library) and only needs to know when to call it again.
//
// wait_fd(fd, events) submits one one-shot poll of `fd` for `events` (POLLIN, POLLOUT, ...) through
// the executor's backend (io_uring's IORING_OP_POLL_ADD; epoll's one-shot registration; a poll(2) in
// test_backend) and returns its revents once it is ready: POLLERR and POLLHUP come whatever was
// asked, so a caller seeing them calls its library, which reports the error. A stop request of the
// awaiting task cancels the wait (an error of ECANCELED): the task resumes only after
// the poll's own completion, never the cancel's. It is a *wait* for admission (admission.hpp).
// The simulation's backend does not support it (EOPNOTSUPP, named in the error).

#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

namespace sluice::io {

runtime::task<result<unsigned>> wait_fd(int fd, unsigned events);

}  // namespace sluice::io
