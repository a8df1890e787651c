// The job's fingerprint (job_fingerprint.hpp): described from the builder, inputs hashed before the
// engine starts, a versioned text form, and the comparison that names each difference.

#include <sluice/buffers/crc32c.hpp>
#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/dataflow/line_file_reader.hpp>
#include <sluice/io/fs.hpp>
#include <sluice/runtime/system.hpp>
#include <sluice/snapshot/manifest.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <span>
#include <system_error>
#include <utility>

namespace sluice::dataflow {

namespace {

constexpr std::string_view magic = "sluice-fingerprint";
constexpr std::size_t max_fingerprint_bytes = 4u * 1024 * 1024;
constexpr std::size_t max_items = 1u << 16;  // stages, entries of a stage, inputs
constexpr std::size_t read_chunk_bytes = 1u << 20;

std::string errno_text(int err) { return std::error_code(err, std::system_category()).message(); }

// --- inputs -----------------------------------------------------------------------------------------

class fd_guard {
 public:
  explicit fd_guard(int fd) noexcept : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() { (void)runtime::sys().close(fd_); }

 private:
  int fd_;
};

// The job reads an input again from a checkpointed offset, and its sources read exactly the size
// recorded here: an input whose bytes do not end at its size cannot be one.
[[noreturn]] void refuse_changing(const std::string& path, std::uint64_t size, std::uint64_t read) {
  const std::string what =
      read < size ? fmt::format("it ended at byte {} while read, before its size ({} bytes): it is being truncated or "
                                "replaced", read, size)
                  : fmt::format("it reads more bytes than its size ({} bytes): it is a file whose size does not tell "
                                "its length (one of /proc or /sys), or one being appended to", size);
  throw job_refused(2, fmt::format("input '{}': {}; exactly-once needs a replayable source (a regular file that can be "
                                   "read again from a checkpointed offset and does not change until the job ends): "
                                   "save it to a file first", path, what));
}

// Size and CRC32C of the regular file `path`, read to the size it had when opened; an input that
// ends before that size or reads past it is refused (refuse_changing).
std::pair<std::uint64_t, std::uint32_t> hash_input(const std::string& path) {
  runtime::system& os = runtime::sys();
  struct ::stat st {};
  // stat first: opening a FIFO without a writer would block.
  if (const int rc = os.stat(path.c_str(), &st); rc < 0) {
    throw job_refused(1, fmt::format("open input '{}': {}", path, errno_text(-rc)));
  }
  if (std::optional<std::string> why = not_replayable(path, st.st_mode)) throw job_refused(2, *why);
  const int fd = os.open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
  if (fd < 0) throw job_refused(1, fmt::format("open input '{}': {}", path, errno_text(-fd)));
  fd_guard guard(fd);
  if (const int rc = os.fstat(fd, &st); rc < 0) {
    throw job_refused(1, fmt::format("stat input '{}': {}", path, errno_text(-rc)));
  }
  if (std::optional<std::string> why = not_replayable(path, st.st_mode)) throw job_refused(2, *why);  // replaced
  const auto size = static_cast<std::uint64_t>(st.st_size);
  std::vector<std::byte> buffer(read_chunk_bytes);
  std::uint64_t done = 0;
  std::uint32_t crc = 0;
  while (done < size) {  // bound: each pass reads > 0 bytes or ends
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - done));
    const ssize_t n = os.pread(fd, buffer.data(), want, static_cast<off_t>(done));
    if (n == -EINTR) continue;
    if (n < 0) throw job_refused(1, fmt::format("read input '{}': {}", path, errno_text(static_cast<int>(-n))));
    if (n == 0) refuse_changing(path, size, done);  // it shrank while read
    crc = buffers::crc32c_extend(crc, std::span<const std::byte>(buffer.data(), static_cast<std::size_t>(n)));
    done += static_cast<std::uint64_t>(n);
  }
  for (;;) {  // bound: EINTR only
    const ssize_t past = os.pread(fd, buffer.data(), 1, static_cast<off_t>(size));
    if (past == -EINTR) continue;
    if (past < 0) throw job_refused(1, fmt::format("read input '{}': {}", path, errno_text(static_cast<int>(-past))));
    if (past > 0) refuse_changing(path, size, size + 1);
    break;
  }
  return {done, crc};
}

// --- text form --------------------------------------------------------------------------------------

bool is_plain(unsigned char c) noexcept { return c > 0x20 && c < 0x7f && c != '%'; }

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_plain(c)) {
      out += ch;
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      if (!is_plain(static_cast<unsigned char>(s[i]))) return std::nullopt;
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = hex_digit(s[i + 1]);
    const int lo = hex_digit(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

template <class N>
std::optional<N> parse_number(std::string_view s, int base = 10) {
  N v{};
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> split(std::string_view line, char on) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = line.find(on, start);
    out.push_back(line.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

class line_reader {
 public:
  explicit line_reader(std::string_view text) : rest_(text) {}
  // The next line's fields if it starts with `keyword` and has `count` fields.
  std::optional<std::vector<std::string_view>> next(std::string_view keyword, std::size_t count) {
    ++line_;
    const std::size_t nl = rest_.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    auto fields = split(rest_.substr(0, nl), ' ');
    rest_.remove_prefix(nl + 1);
    if (fields.size() != count || fields[0] != keyword) return std::nullopt;
    return fields;
  }
  bool peek(std::string_view keyword) const noexcept {
    return rest_.size() > keyword.size() && rest_.substr(0, keyword.size()) == keyword && rest_[keyword.size()] == ' ';
  }
  bool at_end() const noexcept { return rest_.empty(); }
  io::error fail(std::string_view fault) const {
    return io::error(std::make_error_code(std::errc::invalid_argument), fmt::format("job fingerprint: line {}: {}", line_, fault));
  }

 private:
  std::string_view rest_;
  std::size_t line_ = 0;
};

// --- differences ------------------------------------------------------------------------------------

// A keyed stage's max parallelism (job.hpp), named as such in a difference.
constexpr std::string_view key_groups_key = "key_groups";

std::string_view key_of(std::string_view entry) { return entry.substr(0, entry.find('=')); }
std::string_view value_of(std::string_view entry) {
  const std::size_t eq = entry.find('=');
  return eq == std::string_view::npos ? std::string_view() : entry.substr(eq + 1);
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out.append(out.empty() ? "'" : ", '").append(n).append("'");
  return out.empty() ? "none" : out;
}

std::string stage_names(const job_fingerprint& fp) {
  std::vector<std::string> names;
  for (const auto& s : fp.stages) names.push_back(s.name);
  return fmt::format("{} stage{} ({})", names.size(), names.size() == 1 ? "" : "s", quoted_list(names));
}

std::string upstream_names(const job_fingerprint& fp, const stage_identity& s) {
  std::vector<std::string> names;
  for (std::size_t up : s.upstreams) names.push_back(up < fp.stages.size() ? fp.stages[up].name : fmt::format("#{}", up));
  return quoted_list(names);
}

std::string chain_text(const std::vector<std::string>& entries) {
  std::string out;
  for (const std::string& e : entries) out.append(out.empty() ? "" : ", ").append(e);
  return fmt::format("[{}]", out);
}

std::string input_text(const input_identity& in) {
  return fmt::format("'{}' ({} bytes, crc32c 0x{:08x})", in.path, in.size_bytes, in.crc32c);
}

// The same operators in the same order (their values may differ).
bool same_chain(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (key_of(a[i]) != key_of(b[i])) return false;
  }
  return true;
}

void stage_differences(const job_fingerprint& taken, const job_fingerprint& now, std::size_t s, const std::string& at,
                       std::vector<std::string>& out) {
  const stage_identity& t = taken.stages[s];
  const stage_identity& n = now.stages[s];
  if (t.name != n.name) out.push_back(fmt::format("{} was taken with stage {} named '{}'; this run names it '{}'", at, s + 1, t.name, n.name));
  if (t.parallelism != n.parallelism) {
    out.push_back(fmt::format("{} was taken with stage '{}' at parallelism {}; this run has {}", at, t.name, t.parallelism,
                              n.parallelism));
  }
  if (t.upstreams != n.upstreams) {
    out.push_back(fmt::format("{} was taken with stage '{}' reading {}; this run has it reading {}", at, t.name,
                              upstream_names(taken, t), upstream_names(now, n)));
  }
  // Entries with the same keys in the same order differ in their values only: name each value.
  // Otherwise the chain is another one: show both.
  if (!same_chain(t.entries, n.entries)) {
    out.push_back(fmt::format("{} was taken with stage '{}' built as {}; this run builds it as {}", at, t.name,
                              chain_text(t.entries), chain_text(n.entries)));
    return;
  }
  for (std::size_t i = 0; i < t.entries.size(); ++i) {
    if (t.entries[i] == n.entries[i]) continue;
    if (key_of(t.entries[i]) == key_groups_key) {
      out.push_back(fmt::format("{} was taken with stage '{}' at max parallelism {} (key groups); this run has {}", at,
                                t.name, value_of(t.entries[i]), value_of(n.entries[i])));
      continue;
    }
    out.push_back(fmt::format("{} was taken with {} (stage '{}'); this run has {}", at, t.entries[i], t.name,
                              value_of(n.entries[i])));
  }
}

// Whether a keyed stage's max parallelism differs (same chains only): it can never change on resume.
bool key_groups_differ(const job_fingerprint& was, const job_fingerprint& now) {
  if (was.stages.size() != now.stages.size()) return false;
  for (std::size_t s = 0; s < was.stages.size(); ++s) {
    const auto& t = was.stages[s].entries;
    const auto& n = now.stages[s].entries;
    if (!same_chain(t, n)) continue;
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (key_of(t[i]) == key_groups_key && t[i] != n[i]) return true;
    }
  }
  return false;
}

}  // namespace

namespace detail {
std::string identity_path(const std::string& dir) {
  if (dir.empty()) return dir;
  // Lexical only (no syscall): the working directory comes from runtime::sys().
  std::filesystem::path p = std::filesystem::path(io::absolute_path(dir)).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();  // "out/" -> "out"
  return p.string();
}
}  // namespace detail

job_fingerprint describe_job(const job_builder& job) {
  job_fingerprint fp;
  fp.job = job.name();
  for (std::size_t s = 0; s < job.stages().size(); ++s) {
    const stage_def& def = job.stages()[s];
    fp.stages.push_back(stage_identity{def.name, def.parallelism, def.upstreams, def.identity});
    for (const std::string& path : def.inputs) fp.inputs.push_back(input_identity{s, path, 0, 0});
  }
  return fp;
}

job_fingerprint fingerprint_job(const job_builder& job) {
  job_fingerprint fp = describe_job(job);
  std::map<std::string, std::pair<std::uint64_t, std::uint32_t>> hashed;  // a file two sources read: once
  for (input_identity& in : fp.inputs) {
    auto it = hashed.find(in.path);
    if (it == hashed.end()) it = hashed.emplace(in.path, hash_input(in.path)).first;
    in.size_bytes = it->second.first;
    in.crc32c = it->second.second;
  }
  return fp;
}

std::map<std::string, std::uint64_t> input_sizes(const job_fingerprint& fp, std::size_t stage) {
  std::map<std::string, std::uint64_t> out;
  for (const input_identity& in : fp.inputs) {
    if (in.stage == stage) out[in.path] = in.size_bytes;
  }
  return out;
}

std::string encode_fingerprint(const job_fingerprint& fp) {
  std::string out = fmt::format("{} {}\njob {}\n", magic, job_fingerprint_version, escape(fp.job));
  for (const stage_identity& s : fp.stages) {
    std::string ups;
    for (std::size_t up : s.upstreams) ups.append(ups.empty() ? "" : ",").append(std::to_string(up));
    out += fmt::format("stage {} {} {} {}\n", escape(s.name), s.parallelism, ups.empty() ? "-" : ups, s.entries.size());
    for (const std::string& e : s.entries) out += fmt::format("entry {}\n", escape(e));
  }
  for (const input_identity& in : fp.inputs) {
    out += fmt::format("input {} {} {:08x} {}\n", in.stage, in.size_bytes, in.crc32c, escape(in.path));
  }
  return out;
}

io::result<job_fingerprint> decode_fingerprint(std::string_view text) {
  const auto bad = [](std::string_view fault) {
    return io::error(std::make_error_code(std::errc::invalid_argument), fmt::format("job fingerprint: {}", fault));
  };
  if (text.size() > max_fingerprint_bytes) return bad(fmt::format("{} bytes, above the limit {}", text.size(), max_fingerprint_bytes));
  if (!text.empty() && text.back() != '\n') return bad("cut short (no '\\n' at the end)");
  line_reader lines(text);
  auto header = lines.next(magic, 2);
  if (!header) return lines.fail("not a sluice job fingerprint (expected 'sluice-fingerprint <version>')");
  if ((*header)[1] != std::to_string(job_fingerprint_version)) {
    return lines.fail(fmt::format("unsupported version {} (this build reads {})", (*header)[1], job_fingerprint_version));
  }
  job_fingerprint fp;
  auto job = lines.next("job", 2);
  std::optional<std::string> name = job ? unescape((*job)[1]) : std::nullopt;
  if (!name) return lines.fail("expected 'job <name>'");
  fp.job = std::move(*name);
  while (lines.peek("stage")) {
    auto f = lines.next("stage", 5);
    if (!f || fp.stages.size() == max_items) return lines.fail("expected 'stage <name> <parallelism> <upstreams> <entries>'");
    stage_identity s;
    std::optional<std::string> stage_name = unescape((*f)[1]);
    const auto parallelism = parse_number<std::size_t>((*f)[2]);
    const auto entries = parse_number<std::size_t>((*f)[4]);
    if (!stage_name || !parallelism || *parallelism == 0 || !entries || *entries > max_items) {
      return lines.fail("expected 'stage <name> <parallelism> <upstreams> <entries>'");
    }
    s.name = std::move(*stage_name);
    s.parallelism = *parallelism;
    if ((*f)[3] != "-") {
      for (std::string_view up : split((*f)[3], ',')) {
        const auto index = parse_number<std::size_t>(up);
        if (!index || *index >= fp.stages.size()) return lines.fail(fmt::format("upstream '{}' is not an earlier stage", up));
        s.upstreams.push_back(*index);
      }
    }
    for (std::size_t i = 0; i < *entries; ++i) {
      auto e = lines.next("entry", 2);
      std::optional<std::string> entry = e ? unescape((*e)[1]) : std::nullopt;
      if (!entry) return lines.fail("expected 'entry <key=value>'");
      s.entries.push_back(std::move(*entry));
    }
    fp.stages.push_back(std::move(s));
  }
  while (!lines.at_end()) {
    auto f = lines.next("input", 5);
    if (!f || fp.inputs.size() == max_items) return lines.fail("expected 'input <stage> <size_bytes> <crc32c> <path>'");
    const auto stage = parse_number<std::size_t>((*f)[1]);
    const auto size = parse_number<std::uint64_t>((*f)[2]);
    const auto crc = (*f)[3].size() == 8 ? parse_number<std::uint32_t>((*f)[3], 16) : std::nullopt;
    std::optional<std::string> path = unescape((*f)[4]);
    if (!stage || *stage >= fp.stages.size() || !size || !crc || !path) {
      return lines.fail("expected 'input <stage> <size_bytes> <crc32c> <path>'");
    }
    fp.inputs.push_back(input_identity{*stage, std::move(*path), *size, *crc});
  }
  return fp;
}

std::map<std::string, std::vector<std::byte>> fingerprint_metadata(const job_fingerprint& fp) {
  const std::string text = encode_fingerprint(fp);
  const auto bytes = std::as_bytes(std::span<const char>(text.data(), text.size()));
  return {{std::string(snapshot::job_fingerprint_key), std::vector<std::byte>(bytes.begin(), bytes.end())}};
}

std::vector<std::string> fingerprint_differences(const job_fingerprint& taken, const job_fingerprint& now,
                                                 snapshot::checkpoint_id id) {
  const std::string at = fmt::format("checkpoint {}", id);
  std::vector<std::string> out;
  if (taken.job != now.job) {  // everything else differs too: this is the one that explains it
    out.push_back(fmt::format("{} belongs to job '{}'; this run is job '{}'", at, taken.job, now.job));
    return out;
  }
  if (taken.stages.size() != now.stages.size()) {
    out.push_back(fmt::format("{} was taken with {}; this run has {}", at, stage_names(taken), stage_names(now)));
  } else {
    for (std::size_t s = 0; s < taken.stages.size(); ++s) stage_differences(taken, now, s, at, out);
  }
  if (taken.inputs.size() != now.inputs.size()) {
    std::vector<std::string> t, n;
    for (const auto& in : taken.inputs) t.push_back(in.path);
    for (const auto& in : now.inputs) n.push_back(in.path);
    out.push_back(fmt::format("{} read {} input{} ({}); this run reads {} ({})", at, t.size(), t.size() == 1 ? "" : "s",
                              quoted_list(t), n.size(), quoted_list(n)));
    return out;
  }
  for (std::size_t i = 0; i < taken.inputs.size(); ++i) {
    const input_identity& t = taken.inputs[i];
    const input_identity& n = now.inputs[i];
    if (t.size_bytes == n.size_bytes && t.crc32c == n.crc32c) continue;  // the same bytes, wherever they are
    std::string changed;
    if (n.path == t.path) {
      changed = ": the file changed since the checkpoint";
      if (n.size_bytes < t.size_bytes) changed += fmt::format(" (it is {} bytes shorter: truncated)", t.size_bytes - n.size_bytes);
      if (n.size_bytes > t.size_bytes) changed += fmt::format(" (it is {} bytes longer: appended to)", n.size_bytes - t.size_bytes);
    }
    out.push_back(fmt::format("{} read input {}; this run reads {}{}", at, input_text(t), input_text(n), changed));
  }
  return out;
}

namespace {

// The version of a fingerprint that names one older than this build's, or nullopt.
std::optional<std::uint32_t> older_version(std::string_view text) {
  const std::string prefix = std::string(magic) + " ";
  if (text.substr(0, prefix.size()) != prefix) return std::nullopt;
  const std::string_view rest = text.substr(prefix.size());
  const std::optional<std::uint32_t> v = parse_number<std::uint32_t>(rest.substr(0, rest.find('\n')));
  if (!v || *v >= job_fingerprint_version) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::string> resume_refusal(const job_fingerprint& now, const snapshot::recovery_plan& plan,
                                          std::string_view checkpoint_dir) {
  if (!plan.checkpoint) return std::nullopt;
  const snapshot::checkpoint_id id = plan.recovered_id();
  const std::string afresh = "start afresh with empty checkpoint and output directories";
  const auto it = plan.metadata.find(std::string(snapshot::job_fingerprint_key));
  if (it == plan.metadata.end()) {
    return fmt::format("checkpoint {} under '{}' records no job fingerprint: it predates job identity checks, so this "
                       "run cannot tell whether it is a checkpoint of this job with these arguments; not resuming "
                       "(nothing was changed): {}, or finish the job with the sluice build that wrote it",
                       id, checkpoint_dir, afresh);
  }
  const std::string_view text(reinterpret_cast<const char*>(it->second.data()), it->second.size());
  if (const std::optional<std::uint32_t> older = older_version(text)) {
    return fmt::format("checkpoint {} under '{}' was taken by an earlier sluice build (job fingerprint version {}; this "
                       "build writes {}), whose operator and sink state this build cannot read; not resuming (nothing "
                       "was changed): finish the job with the sluice build that took it, or {}",
                       id, checkpoint_dir, *older, job_fingerprint_version, afresh);
  }
  io::result<job_fingerprint> taken = decode_fingerprint(text);
  if (!taken) {
    return fmt::format("checkpoint {} under '{}' records a job fingerprint this build cannot read ({}); not resuming "
                       "(nothing was changed): {}",
                       id, checkpoint_dir, taken.error().message(), afresh);
  }
  std::vector<std::string> differences = fingerprint_differences(taken.value(), now, id);
  if (differences.empty()) return std::nullopt;
  const job_fingerprint& was = taken.value();
  bool rescaled = false;
  bool rebuilt = was.stages.size() != now.stages.size();  // other operators: other arguments, or another build
  if (!rebuilt) {
    for (std::size_t s = 0; s < now.stages.size(); ++s) {
      rescaled = rescaled || was.stages[s].parallelism != now.stages[s].parallelism;
      rebuilt = rebuilt || !same_chain(was.stages[s].entries, now.stages[s].entries);
    }
  }
  constexpr std::size_t max_named = 10;  // a long list says no more than its first lines
  std::string out;
  for (std::size_t i = 0; i < differences.size() && i < max_named; ++i) out.append(differences[i]).append("\n");
  if (differences.size() > max_named) out += fmt::format("(and {} more differences)\n", differences.size() - max_named);
  out += fmt::format("not resuming from '{}' (nothing was changed): rerun with the arguments checkpoint {} was taken "
                     "with, or {}{}{}{}",
                     checkpoint_dir, id, afresh,
                     rescaled ? "; resuming at another parallelism (rescaling) is not supported yet" : "",
                     key_groups_differ(was, now) ? "; a keyed stage's max parallelism cannot change across a resume "
                                                   "(its state is kept by key group)"
                                                 : "",
                     rebuilt ? fmt::format("; with the same arguments, the job's operators changed (another build of "
                                           "the job or of sluice): finish it with the build that took checkpoint {}",
                                           id)
                             : std::string());
  return out;
}

}  // namespace sluice::dataflow
