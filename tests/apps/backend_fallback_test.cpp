// The epoll fallback as a container's seccomp profile causes it: `sluice` runs under a filter that
// denies io_uring_setup with EPERM (built with libseccomp, installed in the child before exec), and
// with SLUICE_BACKEND=auto a word count there gives exactly the output of a normal run. Also: the
// filtered `sluice --version` names epoll and why, and SLUICE_BACKEND=uring there fails with the
// cause instead of falling back. Skipped when the build found no libseccomp.

#include "run_sluice.hpp"

#include <support/dir_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#if SLUICE_HAVE_SECCOMP
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#endif

extern char** environ;

using namespace sluice::test;

namespace {
// The test's environment with SLUICE_BACKEND set to `backend` (and SLUICE_LOG to info).
struct environment {
  explicit environment(const std::string& backend) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (entry.rfind("SLUICE_BACKEND=", 0) == 0 || entry.rfind("SLUICE_LOG=", 0) == 0) continue;
      entries.push_back(entry);
    }
    entries.push_back("SLUICE_BACKEND=" + backend);
    entries.push_back("SLUICE_LOG=info");
    for (auto& entry : entries) pointers.push_back(entry.data());
    pointers.push_back(nullptr);
  }
  std::vector<std::string> entries;
  std::vector<char*> pointers;
};

}  // namespace

#if SLUICE_HAVE_SECCOMP
namespace {

// A filter that answers io_uring_setup with EPERM and allows everything else (what Docker's
// default profile does), as the classic BPF program libseccomp exports: built here, in the parent,
// so the child only has to install it (two prctl calls, both async-signal-safe).
struct io_uring_denial {
  // `answer`: the errno the filter gives (EPERM as Docker's profile; ENOSYS as some others).
  explicit io_uring_denial(int answer = EPERM) {
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == nullptr) throw std::runtime_error("seccomp_init failed");
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(answer), SCMP_SYS(io_uring_setup), 0);
    const int fd = ::memfd_create("io-uring-denial", MFD_CLOEXEC);
    if (rc == 0 && fd >= 0) rc = seccomp_export_bpf(ctx, fd);
    seccomp_release(ctx);
    if (rc != 0 || fd < 0) throw std::runtime_error("building the seccomp filter failed");
    const off_t size = ::lseek(fd, 0, SEEK_END);
    code.resize(static_cast<std::size_t>(size) / sizeof(sock_filter));
    const ssize_t n = ::pread(fd, code.data(), code.size() * sizeof(sock_filter), 0);
    ::close(fd);
    if (n != size || code.empty()) throw std::runtime_error("reading the seccomp filter failed");
    program.len = static_cast<unsigned short>(code.size());
    program.filter = code.data();
  }
  // In the child, before exec.
  static bool install(const void* self) noexcept {
    const auto* d = static_cast<const io_uring_denial*>(self);
    return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &d->program, 0, 0) == 0;
  }
  std::vector<sock_filter> code;
  sock_fprog program{};
};

tool_run run_denied(const io_uring_denial& denial, const environment& env, std::vector<std::string> args) {
  return run_sluice(std::move(args), tool_setup{&io_uring_denial::install, &denial, env.pointers.data()});
}

// Every published file of an output directory, by name: the exact output.
std::vector<std::pair<std::string, std::string>> published_files(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& name : names_in(dir)) {
    if (name.rfind("part-", 0) == 0) files.emplace_back(name, read_text(dir + "/" + name));
  }
  return files;
}

}  // namespace
#endif

TEST_CASE("under a seccomp filter denying io_uring_setup, sluice falls back to epoll and a word count's output is "
          "exact",
          "[backend][seccomp]") {
#if !SLUICE_HAVE_SECCOMP
  WARN("sluice-test-skipped: built without libseccomp (install libseccomp-dev and reconfigure)");
  return;
#else
  temp_dir dir;
  const io_uring_denial denial;
  const std::string input = dir.file("in.txt");
  REQUIRE(run_sluice({"corpus", "--output", input, "--lines", "20000", "--seed", "7"}).exit_code == 0);
  const std::vector<std::string> job = {"--input", input, "--parallelism", "2", "--quiet"};
  auto wordcount = [&](const std::string& name) {
    std::vector<std::string> args = {"wordcount", "--output", dir.file(name), "--checkpoint-dir",
                                     dir.file(name + "-chk")};
    args.insert(args.end(), job.begin(), job.end());
    return args;
  };

  const tool_run normal = run_sluice(wordcount("normal"));
  REQUIRE(normal.exit_code == 0);

  const environment automatic("auto");
  const tool_run denied = run_denied(denial, automatic, wordcount("denied"));
  INFO(denied.err);
  REQUIRE(denied.exit_code == 0);
  const auto first = denied.err.find("I/O backend: epoll");
  CHECK(first != std::string::npos);
  CHECK(denied.err.find("I/O backend", first + 1) == std::string::npos);  // once, not per executor
  CHECK(denied.err.find("seccomp") != std::string::npos);  // the warning says why
  const auto expected = published_files(dir.file("normal"));
  REQUIRE_FALSE(expected.empty());
  CHECK(published_files(dir.file("denied")) == expected);
  CHECK(denied.out == normal.out);

  const tool_run version = run_denied(denial, automatic, {"--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.out.find("I/O backend: epoll") != std::string::npos);

  // Forced onto io_uring, it fails and says why.
  const environment uring("uring");
  const tool_run forced = run_denied(denial, uring, wordcount("forced"));
  CHECK(forced.exit_code != 0);
  CHECK(forced.err.find("io_uring") != std::string::npos);
#endif
}

TEST_CASE("a seccomp filter answering ENOSYS on a kernel with io_uring is blamed and not the kernel",
          "[backend][seccomp]") {
#if !SLUICE_HAVE_SECCOMP
  WARN("sluice-test-skipped: built without libseccomp (install libseccomp-dev and reconfigure)");
  return;
#else
  temp_dir dir;
  const environment automatic("auto");
  for (const int answer : {ENOSYS, EPERM}) {
    const io_uring_denial denial(answer);
    // (`corpus` writes through an executor: its backend's choice is logged as a warning)
    const tool_run corpus = run_denied(denial, automatic, {"corpus", "--output", dir.file("c.txt"), "--lines", "10"});
    INFO(corpus.err);
    CHECK(corpus.exit_code == 0);
    const std::string said = corpus.err;
    CHECK(said.find("I/O backend: epoll, because") != std::string::npos);
    CHECK(said.find("seccomp") != std::string::npos);
    CHECK(said.find("lacks io_uring") == std::string::npos);
    CHECK(said.find("run on Linux 6.1") == std::string::npos);
    // The errno's text once, not once more at the end.
    const std::string text = std::strerror(answer);
    const auto first = said.find(text);
    CHECK(first != std::string::npos);
    CHECK(said.find(text, first + 1) == std::string::npos);
  }
  // Where io_uring_setup is refused and SLUICE_BACKEND=uring, the failure says it once too.
  const io_uring_denial denial(EPERM);
  const environment uring("uring");
  const tool_run forced = run_denied(denial, uring, {"corpus", "--output", dir.file("d.txt"), "--lines", "10"});
  INFO(forced.err);
  CHECK(forced.exit_code != 0);
  const auto first = forced.err.find("Operation not permitted");
  CHECK(first != std::string::npos);
  CHECK(forced.err.find("Operation not permitted", first + 1) == std::string::npos);
#endif
}

TEST_CASE("SLUICE_BACKEND chooses the backend, and an unknown value is refused with the choices named", "[backend]") {
  temp_dir dir;
  const environment epoll("epoll");
  const tool_run version = run_sluice({"--version"}, tool_setup{nullptr, nullptr, epoll.pointers.data()});
  CHECK(version.exit_code == 0);
  CHECK(version.out.find("I/O backend: epoll (SLUICE_BACKEND=epoll)") != std::string::npos);

  const environment bogus("io-uring-please");
  const tool_run r = run_sluice({"demo", "--connections", "1", "--duration-ms", "50", "--quiet"},
                                tool_setup{nullptr, nullptr, bogus.pointers.data()});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("SLUICE_BACKEND=io-uring-please is not a backend") != std::string::npos);
  CHECK(r.err.find("epoll") != std::string::npos);
}
