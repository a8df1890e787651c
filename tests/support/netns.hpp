#pragma once
// netns: "hosts" for a test, made of Linux network namespaces. One hub namespace holds a bridge;
// each host is a namespace of its own with one veth pair to that bridge (eth0 inside, 10.210.0.N/24)
// and loopback up. Hosts reach each other through the hub only, so taking a host's cable out
// (unplug(): the hub-side end of its veth goes down) silences it for everybody, in both directions,
// without an error on its own sockets: a partition, not a reset.
//
// Names are "sl<pid>-<host>" (the pid of the test process), so test processes running at once
// never share one. The destructor deletes every namespace it made (their veths go with them),
// also after a failed REQUIRE (it runs while the exception unwinds). Namespaces left over by a
// test process that was killed (ctest's timeout) are deleted by the next fixture, which removes
// every "sl<pid>-*" whose pid no longer runs.
//
// Making namespaces needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's `ip`:
// netns_hosts::unavailable() says why not ("" when they can be made), and
// SLUICE_SKIP_WITHOUT_NETNS() ends the test case as skipped (tests/CMakeLists.txt) with that reason.
//
// A process runs inside a host by setns(2) in the forked child, before exec: open_netns(name)
// gives the descriptor (in the parent: open is not async-signal-safe), enter_netns(fd) switches
// the child. run_in_netns runs a command there and returns its exit code and output (etcdctl, say).
//
// Blocking calls (fork, waitpid, system): for the test's main thread only.
//
//   SLUICE_SKIP_WITHOUT_NETNS();
//   netns_hosts net({"etcd", "w0", "w1"});
//   net.address("etcd");           // "10.210.0.2"
//   net.unplug("w1"); ... net.plug("w1");
//   net.cut_between("w0", "w1"); ... net.mend_between("w0", "w1");

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

// The output of a command, and how it exited (-1: not normally).
struct command_run {
  int exit_code = -1;
  std::string out;
};

inline int open_netns(const std::string& name) {
  const std::string path = "/var/run/netns/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  return fd;
}

// In a forked child: joins the network namespace `fd` (or _exit(125)).
inline void enter_netns(int fd) {
  if (fd >= 0 && ::setns(fd, CLONE_NEWNET) != 0) ::_exit(125);
}

// Runs argv (argv[0] found on PATH) inside netns `ns` ("" = this one); stdout and stderr together.
inline command_run run_in_netns(const std::string& ns, const std::vector<std::string>& args) {
  const int nsfd = ns.empty() ? -1 : open_netns(ns);
  char path[] = "/tmp/sluice-netns-out-XXXXXX";
  const int out = ::mkstemp(path);
  if (out < 0) throw std::runtime_error("mkstemp failed");
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
    enter_netns(nsfd);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  if (nsfd >= 0) ::close(nsfd);
  ::close(out);
  command_run r;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  std::ifstream in(path, std::ios::binary);
  r.out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  ::unlink(path);
  return r;
}

class netns_hosts {
 public:
  // Why namespaces cannot be made here ("" when they can).
  static std::string unavailable() {
    if (::geteuid() != 0) return "network namespaces need root (CAP_NET_ADMIN); run the test as root";
    if (::access("/usr/sbin/ip", X_OK) != 0 && ::access("/sbin/ip", X_OK) != 0 && ::access("/usr/bin/ip", X_OK) != 0 &&
        ::access("/bin/ip", X_OK) != 0) {
      return "iproute2's `ip` is not installed (apt-get install iproute2)";
    }
    const std::string probe = "sl" + std::to_string(::getpid()) + "-probe";
    const command_run made = run_in_netns("", {"ip", "netns", "add", probe});
    (void)run_in_netns("", {"ip", "netns", "del", probe});
    if (made.exit_code != 0) return "`ip netns add` failed here: " + made.out;
    return {};
  }

  // One namespace per host, 10.210.0.2, .3, ... in the order given; the hub's bridge is 10.210.0.1.
  explicit netns_hosts(std::vector<std::string> hosts) : prefix_("sl" + std::to_string(::getpid()) + "-") {
    sweep_leftovers();
    try {
      ip({"netns", "add", name("hub")});
      made_.push_back(name("hub"));
      ip({"-n", name("hub"), "link", "add", "br0", "type", "bridge"});
      ip({"-n", name("hub"), "link", "set", "br0", "up"});
      ip({"-n", name("hub"), "link", "set", "lo", "up"});
      unsigned n = 2;
      for (const std::string& h : hosts) {
        const std::string ns = name(h);
        ip({"netns", "add", ns});
        made_.push_back(ns);
        const std::string cable = "v" + std::to_string(n);  // the hub's end
        ip({"link", "add", cable, "netns", name("hub"), "type", "veth", "peer", "name", "eth0", "netns", ns});
        ip({"-n", name("hub"), "link", "set", cable, "master", "br0", "up"});
        const std::string addr = "10.210.0." + std::to_string(n);
        ip({"-n", ns, "addr", "add", addr + "/24", "dev", "eth0"});
        ip({"-n", ns, "link", "set", "eth0", "up"});
        ip({"-n", ns, "link", "set", "lo", "up"});
        hosts_[h] = host{ns, addr, cable};
        ++n;
      }
    } catch (...) {
      remove_all();
      throw;
    }
  }
  netns_hosts(const netns_hosts&) = delete;
  netns_hosts& operator=(const netns_hosts&) = delete;
  ~netns_hosts() { remove_all(); }

  const std::string& netns(const std::string& h) const { return at(h).ns; }
  const std::string& address(const std::string& h) const { return at(h).address; }
  // The host's cable out of the hub (and back in): nothing reaches it, nothing leaves it.
  void unplug(const std::string& h) { ip({"-n", name("hub"), "link", "set", at(h).cable, "down"}); }
  void plug(const std::string& h) { ip({"-n", name("hub"), "link", "set", at(h).cable, "up"}); }
  // Hosts a and b no longer reach each other (both still reach every other host): each drops what
  // it would send to the other (a blackhole route), so their connections go silent, and a new
  // connect between them fails at once (EINVAL). mend() takes the routes out again.
  void cut_between(const std::string& a, const std::string& b) {
    ip({"-n", at(a).ns, "route", "add", "blackhole", at(b).address + "/32"});
    ip({"-n", at(b).ns, "route", "add", "blackhole", at(a).address + "/32"});
  }
  void mend_between(const std::string& a, const std::string& b) {
    ip({"-n", at(a).ns, "route", "del", "blackhole", at(b).address + "/32"});
    ip({"-n", at(b).ns, "route", "del", "blackhole", at(a).address + "/32"});
  }

 private:
  struct host {
    std::string ns, address, cable;
  };
  const host& at(const std::string& h) const {
    auto it = hosts_.find(h);
    if (it == hosts_.end()) throw std::logic_error("netns_hosts: no host " + h);
    return it->second;
  }
  std::string name(const std::string& h) const { return prefix_ + h; }

  static void ip(std::vector<std::string> args) {
    args.insert(args.begin(), "ip");
    const command_run r = run_in_netns("", args);
    if (r.exit_code != 0) {
      std::string line;
      for (const auto& a : args) line += a + " ";
      throw std::runtime_error(line + "failed: " + r.out);
    }
  }

  // Namespaces of test processes that are gone (killed before their destructor ran).
  static void sweep_leftovers() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/var/run/netns", ec)) {
      const std::string n = e.path().filename().string();
      if (n.size() < 4 || n.rfind("sl", 0) != 0) continue;
      const std::size_t dash = n.find('-');
      if (dash == std::string::npos || dash == 2) continue;
      const std::string pid = n.substr(2, dash - 2);
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (::kill(static_cast<pid_t>(std::stol(pid)), 0) == 0 || errno == EPERM) continue;
      (void)run_in_netns("", {"ip", "netns", "del", n});
    }
  }

  void remove_all() noexcept {
    try {
      for (auto it = made_.rbegin(); it != made_.rend(); ++it) (void)run_in_netns("", {"ip", "netns", "del", *it});
    } catch (...) {
    }
    made_.clear();
  }

  std::string prefix_;
  std::vector<std::string> made_;
  std::map<std::string, host> hosts_;
};

}  // namespace sluice::test

// Ends the test case, reported by ctest as skipped (tests/CMakeLists.txt), where namespaces cannot
// be made.
#define SLUICE_SKIP_WITHOUT_NETNS()                                                            \
  do {                                                                                         \
    if (const std::string why = ::sluice::test::netns_hosts::unavailable(); !why.empty()) {    \
      std::printf("sluice-test-skipped: %s\n", why.c_str());                                   \
      return;                                                                                  \
    }                                                                                          \
  } while (0)
