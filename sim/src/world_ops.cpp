// world: the asynchronous operations, their latencies, results and faults (see world.hpp).

#include <sluice/sim/world.hpp>

#include "world_backend.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::sim {

using runtime::io_op;
using runtime::op_code;
using namespace std::chrono_literals;

world::clock::duration world::latency(const io_op& op) {
  std::chrono::nanoseconds base{0};
  switch (op.code) {
    case op_code::fsync:
    case op_code::fdatasync: base = std::chrono::nanoseconds(random_.between(50'000, 2'000'000)); break;
    case op_code::read:
    case op_code::write:
    case op_code::openat:
    case op_code::close:
    case op_code::renameat:
    case op_code::mkdirat:
    case op_code::unlinkat:
    case op_code::statx: base = std::chrono::nanoseconds(random_.between(2'000, 100'000)); break;
    case op_code::timeout: return op.deadline > now_ ? op.deadline - now_ : 0ns;
    default: base = std::chrono::nanoseconds(random_.between(1'000, 40'000)); break;
  }
  if (fault(options_.faults.slow_io)) {
    base += std::chrono::nanoseconds(random_.between(5'000'000, 80'000'000));
    note("fault slow", static_cast<int>(op.code), traced(op.fd));
  }
  return base;
}

void world::submit(backend& b, io_op& op) {
  ++b.in_world_;
  if (op.code == op_code::cancel) {
    cancel(b, op);
    return;
  }
  if (!op.internal) {
    // No room for its class, others of its class queued before it, or a ring the kernel reports
    // busy: the operation waits at the back of its class's FIFO backlog and enters the ring at a
    // later step (drain_backlogs), as with io_uring (runtime/admission.hpp).
    const bool room = b.admission_.has_room(op);
    if (!b.admission_.may_enter(op) || fault(options_.faults.ring_busy)) {
      note(room ? "sq-busy" : "sq-full", static_cast<int>(op.code), traced(op.fd));
      b.admission_.defer(op);
      return;
    }
  }
  b.admission_.entered(op);
  pending_.push_back({&op, &b, now_ + latency(op), seq_++});
}

void world::drain_backlogs() {
  for (backend* b : backends_) {
    while (io_op* op = b->admission_.next()) {
      b->admission_.take(*op);
      b->admission_.entered(*op);
      pending_.push_back({op, b, now_ + latency(*op), seq_++});
    }
  }
}

std::size_t world::backlogged_operations() const noexcept {
  std::size_t n = 0;
  for (const backend* b : backends_) n += b->admission_.backlog_size();
  return n;
}

std::size_t world::pending_operations() const noexcept {
  std::size_t n = pending_.size();
  for (const backend* b : backends_) n += b->admission_.backlog_size();
  return n;
}

// A cancel whose target still waits in a backlog: it never reaches the ring, and both complete
// (the target with -ECANCELED), as the io_uring backend does.
bool world::cancel_in_backlog(backend& b, io_op& cancel_op) {
  if (cancel_op.target == nullptr) return false;
  for (backend* owner : backends_) {
    if (!owner->admission_.remove(cancel_op.target)) continue;
    --owner->in_world_;
    note("cancel-backlogged", static_cast<int>(cancel_op.target->code), traced(cancel_op.target->fd));
    owner->finish(*cancel_op.target, -ECANCELED);
    b.finish(cancel_op, 0);
    return true;
  }
  return false;
}

void world::cancel(backend& b, io_op& cancel_op) {
  auto it = std::find_if(pending_.begin(), pending_.end(), [&](const pending_op& p) { return p.op == cancel_op.target; });
  --b.in_world_;
  if (it == pending_.end() && cancel_in_backlog(b, cancel_op)) return;
  if (it == pending_.end()) {
    note("cancel-missed", static_cast<int>(cancel_op.target != nullptr ? cancel_op.target->code : op_code::nop), 0);
    b.finish(cancel_op, -ENOENT);
    return;
  }
  const std::size_t index = static_cast<std::size_t>(it - pending_.begin());
  if (it->op->code != op_code::timeout && !(it->op->internal) && can_complete(*it) &&
      fault(options_.faults.cancel_late)) {
    // The kernel had already run the target: it completes with its real result.
    note("fault cancel-late", static_cast<int>(it->op->code), traced(it->op->fd));
    complete(index);
    b.finish(cancel_op, -EALREADY);
    return;
  }
  io_op& target = *it->op;
  backend& owner = *it->owner;
  pending_.erase(it);
  --owner.in_world_;
  owner.admission_.left(target);
  note("cancel", static_cast<int>(target.code), traced(target.fd));
  // Either completion may come first.
  if (random_.coin()) {
    owner.finish(target, -ECANCELED);
    b.finish(cancel_op, 0);
  } else {
    b.finish(cancel_op, 0);
    owner.finish(target, -ECANCELED);
  }
}

bool world::can_complete(const pending_op& p) const {
  const io_op& op = *p.op;
  if (op.code == op_code::timeout) return now_ >= op.deadline;
  const descriptor* d = find(op.fd);
  if (d == nullptr) return !(op.internal && op.code == op_code::read);  // EBADF; a wake-up read never ends
  if (d->what != descriptor::kind::socket) return true;
  if (!net_.exists(d->socket)) return true;
  const network::socket& s = net_.at(d->socket);
  switch (op.code) {
    case op_code::accept: return !s.backlog.empty() || s.listener_shut || s.st != network::state::listening;
    case op_code::read:
    case op_code::recv:
      if (s.reset || s.shut_read || s.st != network::state::connected) return true;
      if (op.code == op_code::recv && (op.flags & MSG_DONTWAIT) != 0) return true;  // EAGAIN now, as the kernel
      if (now_ < s.stalled_until) return false;
      return !s.inbox.empty() || s.eof;
    case op_code::write:
    case op_code::send: {
      if (s.reset || s.shut_write || s.st != network::state::connected || s.peer < 0 || !net_.exists(s.peer)) {
        return true;
      }
      const network::socket& peer = net_.at(s.peer);
      return peer.reset || peer.shut_read || peer.inbox.size() < peer.window;
    }
    default: return true;
  }
}

world::clock::time_point world::wake_time(const pending_op& p) const {
  if (p.op->code == op_code::timeout) return std::max(p.ready_at, p.op->deadline);
  if (p.ready_at > now_) return p.ready_at;
  if (const descriptor* d = find(p.op->fd); d != nullptr && d->what == descriptor::kind::socket &&
                                            net_.exists(d->socket)) {
    const network::socket& s = net_.at(d->socket);
    if (s.stalled_until > now_) return s.stalled_until;
  }
  return can_complete(p) ? now_ : clock::time_point::max();
}

void world::complete(std::size_t index) {
  pending_op p = pending_[index];
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(index));
  --p.owner->in_world_;
  p.owner->admission_.left(*p.op);
  std::string detail;
  if (options_.trace != nullptr) {
    if (const descriptor* d = find(p.op->fd)) detail = d->path;
    if (p.op->path != nullptr) detail = p.op->path;
    if (p.op->path2 != nullptr) detail += std::string(" -> ") + p.op->path2;
  }
  const std::int32_t result = perform(*p.op);
  note(runtime::to_string(p.op->code), traced(p.op->fd), result, detail);
  p.owner->finish(*p.op, result);
}

std::int32_t world::perform(io_op& op) {
  switch (op.code) {
    case op_code::nop: return 0;
    case op_code::timeout: return -ETIME;
    case op_code::openat: {
      const int fd = open_at(op.fd, op.path, static_cast<int>(op.flags));
      return fd;
    }
    case op_code::mkdirat: {
      std::string path;
      if (!absolute(op.fd, op.path, path)) return -EBADF;
      return disk_.make_directory(path);
    }
    case op_code::unlinkat: {
      std::string path;
      if (!absolute(op.fd, op.path, path)) return -EBADF;
      return disk_.remove(path, (op.flags & AT_REMOVEDIR) != 0);
    }
    case op_code::renameat: {
      std::string from, to;
      if (!absolute(op.fd, op.path, from) || !absolute(op.fd2, op.path2, to)) return -EBADF;
      return disk_.rename(from, to);
    }
    case op_code::statx: return perform_statx(op);
    case op_code::poll: return -EOPNOTSUPP;  // readiness waits (io::wait_fd) are not simulated
    case op_code::connect: {
      descriptor* d = find(op.fd);
      if (d == nullptr) return -EBADF;
      if (d->what != descriptor::kind::socket) return -ENOTSOCK;
      if (fault(options_.faults.net_refuse)) {
        note("fault refuse", op.fd, 0);
        return -ECONNREFUSED;
      }
      return net_.connect(d->socket, static_cast<const sockaddr*>(op.buf), op.len);
    }
    default: break;
  }
  descriptor* d = find(op.fd);
  if (d == nullptr) return -EBADF;
  if (op.code == op_code::close) {
    release_descriptor(op.fd);
    return 0;
  }
  if (d->what == descriptor::kind::socket) return perform_socket(op, *d);
  return perform_file(op, *d);
}

// statx(2) as the kernel answers it, from what stat/fstat say about the simulated disk.
std::int32_t world::perform_statx(io_op& op) {
  struct stat st {};
  int rc = 0;
  if ((op.flags & AT_EMPTY_PATH) != 0 && (op.path == nullptr || op.path[0] == '\0')) {
    rc = fstat(op.fd, &st);
  } else {
    std::string path;
    if (!absolute(op.fd, op.path, path)) return -EBADF;
    rc = stat(path.c_str(), &st);
  }
  if (rc < 0) return rc;
  if (op.buf == nullptr) return -EFAULT;
  struct statx out {};
  out.stx_mask = STATX_BASIC_STATS;
  out.stx_mode = static_cast<std::uint16_t>(st.st_mode);
  out.stx_nlink = static_cast<std::uint32_t>(st.st_nlink);
  out.stx_ino = st.st_ino;
  out.stx_size = static_cast<std::uint64_t>(st.st_size);
  out.stx_blksize = static_cast<std::uint32_t>(st.st_blksize);
  out.stx_blocks = static_cast<std::uint64_t>(st.st_blocks);
  std::memcpy(op.buf, &out, sizeof out);
  return 0;
}

std::int32_t world::perform_file(io_op& op, descriptor& d) {
  const bool at_cursor = op.offset == static_cast<std::uint64_t>(-1);
  switch (op.code) {
    case op_code::read: {
      if (d.what == descriptor::kind::directory) return -EISDIR;
      if (d.access == O_WRONLY) return -EBADF;
      if (fault(options_.faults.disk_error)) {
        note("fault eio", op.fd, 0, d.path);
        return -EIO;
      }
      std::size_t len = op.len;
      if (len > 1 && fault(options_.faults.short_io)) len = random_.between(1, len - 1);
      const std::uint64_t at = at_cursor ? d.cursor : op.offset;
      const std::size_t n = disk_.read(d.inode, op.buf, len, at);
      if (at_cursor) d.cursor += n;
      return static_cast<std::int32_t>(n);
    }
    case op_code::write: {
      if (d.what == descriptor::kind::directory) return -EISDIR;
      if (d.access == O_RDONLY) return -EBADF;
      if (fault(options_.faults.disk_error)) {
        note("fault eio", op.fd, 0, d.path);
        return -EIO;
      }
      if (fault(options_.faults.disk_full)) {
        note("fault enospc", op.fd, 0, d.path);
        return -ENOSPC;
      }
      std::size_t len = op.len;
      if (len > 1 && fault(options_.faults.short_io)) len = random_.between(1, len - 1);
      const std::uint64_t at = d.append ? disk_.size(d.inode) : (at_cursor ? d.cursor : op.offset);
      const int n = disk_.write(d.inode, op.buf, len, at);
      if (n > 0 && at_cursor) d.cursor = at + static_cast<std::uint64_t>(n);
      return n;
    }
    case op_code::fsync:
    case op_code::fdatasync:
      if (fault(options_.faults.disk_error)) {
        note("fault fsync-eio", op.fd, 0, d.path);
        disk_.fail_sync(d.inode, random_);
        return -EIO;
      }
      disk_.sync(d.inode);
      return 0;
    case op_code::send:
    case op_code::recv:
    case op_code::accept:
    case op_code::shutdown: return -ENOTSOCK;
    default: return -EINVAL;
  }
}

std::int32_t world::perform_socket(io_op& op, descriptor& d) {
  if (!net_.exists(d.socket)) return -EBADF;
  network::socket& s = net_.at(d.socket);
  switch (op.code) {
    case op_code::accept: {
      if (s.st != network::state::listening || s.listener_shut) return -EINVAL;
      const int id = net_.take_accepted(d.socket);
      if (id < 0) return -EAGAIN;
      descriptor c;
      c.what = descriptor::kind::socket;
      c.socket = id;
      c.access = O_RDWR;
      const int fd = add_descriptor(c);
      if (op.buf != nullptr && op.addr_len != nullptr) {
        const network::socket& a = net_.at(id);
        const socklen_t n = std::min<socklen_t>(*op.addr_len, a.remote_len);
        std::memcpy(op.buf, &a.remote, n);
        *op.addr_len = a.remote_len;
      }
      return fd;
    }
    case op_code::read:
    case op_code::recv: {
      if (s.reset) return -ECONNRESET;
      if (s.st != network::state::connected) return -ENOTCONN;
      if (!s.inbox.empty() && fault(options_.faults.net_reset)) {
        note("fault reset", op.fd, 0);
        net_.reset(d.socket);
        return -ECONNRESET;
      }
      const bool dont_wait = op.code == op_code::recv && (op.flags & MSG_DONTWAIT) != 0;
      const bool peek = op.code == op_code::recv && (op.flags & MSG_PEEK) != 0;
      if (dont_wait && (now_ < s.stalled_until || (s.inbox.empty() && !s.eof && !s.shut_read))) return -EAGAIN;
      if (s.inbox.empty()) return 0;  // end of stream, or shut down for reading
      std::size_t n = std::min<std::size_t>(op.len, s.inbox.size());
      // Streams arrive in pieces: cut where the seed says.
      if (n > 1 && (random_.below(4) == 0 || fault(options_.faults.short_io))) n = random_.between(1, n);
      std::memcpy(op.buf, s.inbox.data(), n);
      if (!peek) s.inbox.erase(0, n);
      return static_cast<std::int32_t>(n);
    }
    case op_code::write:
    case op_code::send: {
      if (fault(options_.faults.net_reset)) {
        note("fault reset", op.fd, 0);
        net_.reset(d.socket);
        return -ECONNRESET;
      }
      std::size_t len = op.len;
      if (len > 1 && (random_.below(8) == 0 || fault(options_.faults.short_io))) len = random_.between(1, len);
      const long n = net_.send(d.socket, static_cast<const char*>(op.buf), len);
      if (n > 0 && s.peer >= 0 && fault(options_.faults.net_stall)) {
        network::socket& peer = net_.at(s.peer);
        peer.stalled_until = now_ + std::chrono::nanoseconds(random_.between(1'000'000, 60'000'000));
        note("fault stall", op.fd, 0);
      }
      return static_cast<std::int32_t>(n);
    }
    case op_code::shutdown: return net_.shutdown(d.socket, static_cast<int>(op.flags));
    case op_code::fsync:
    case op_code::fdatasync: return -EINVAL;
    default: return -EINVAL;
  }
}

}  // namespace sluice::sim
