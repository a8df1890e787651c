// exactly_once_file_sink (see the header for the protocol and the state format).
//
// Durability, step by step: a staged file is created, the high-water mark raised past it and the
// staging area fsynced (so both entries survive a crash) before its first byte is written; it is
// pending only once its bytes are fsynced and it is closed. A commit renames pending files out of the area and forgets them only once the fsync of
// the output directory after the renames succeeded; until then they stay in the state, and
// recover() republishes them idempotently. (The area is not fsynced after a commit: if a crash
// keeps the staged name too, it is a second link to the published file, and recover() drops it.)

#include <sluice/dataflow/exactly_once_file_sink.hpp>

#include <sluice/io/fs.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/system.hpp>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <map>
#include <set>
#include <system_error>
#include <utility>

namespace sluice::dataflow {

namespace {

constexpr std::size_t task_digits = 5;
constexpr std::size_t sequence_digits = 12;
constexpr std::string_view staging_prefix = "staged-";    // in the staging area
constexpr std::string_view high_water_prefix = "next-";   // in the staging area
constexpr std::string_view final_prefix = "part-";
constexpr std::size_t state_header_bytes = 4 + 4 + 8 + 4;
constexpr std::size_t state_entry_bytes = 8 + 8;

std::string padded(std::uint64_t value, std::size_t width) {
  std::string s = std::to_string(value);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// "<prefix><task>-<sequence>" with decimal numbers, or nullopt.
struct parsed_name {
  std::uint64_t task = 0;
  std::uint64_t sequence = 0;
};
std::optional<parsed_name> parse_name(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  const auto dash = name.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  parsed_name out;
  const auto number = [](std::string_view digits, std::uint64_t& value) {
    if (digits.empty() || digits.size() > 20) return false;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return ec == std::errc() && end == digits.data() + digits.size();
  };
  if (!number(name.substr(0, dash), out.task) || !number(name.substr(dash + 1), out.sequence)) return std::nullopt;
  return out;
}

std::string parent_of(std::string dir);

// mkdir `dir` if missing; its entry is made durable in `parent` either way: one that exists may
// be an earlier attempt's, whose fsync of `parent` failed, and a crash would still take it away.
runtime::task<io::result<void>> make_directory_durably(std::string dir, std::string parent) {
  auto made = co_await io::make_directory(dir);
  if (!made && made.error().code() != std::errc::file_exists) co_return made;
  co_return co_await io::fsync_directory(std::move(parent));
}

std::string parent_of(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const auto slash = dir.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return dir.substr(0, slash);
}

void put_le(std::vector<std::byte>& out, std::uint64_t value, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(value >> (8 * i)));
}

std::uint64_t get_le(std::span<const std::byte> in, std::size_t at, std::size_t bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i) value |= std::to_integer<std::uint64_t>(in[at + i]) << (8 * i);
  return value;
}

io::error state_error(std::string why) {
  return io::error(std::make_error_code(std::errc::illegal_byte_sequence), "decode file sink state: " + why);
}

// Asserts that the sink task does not overlap calls (it awaits each before the next).
class call_guard {
 public:
  explicit call_guard(bool& busy) noexcept : busy_(busy) {
    assert(!busy_ && "exactly_once_file_sink: overlapping calls");
    busy_ = true;
  }
  call_guard(const call_guard&) = delete;
  call_guard& operator=(const call_guard&) = delete;
  ~call_guard() { busy_ = false; }

 private:
  bool& busy_;
};

}  // namespace

// ---- state ------------------------------------------------------------------------------------

std::vector<std::byte> exactly_once_file_sink::encode_state(const state& s) {
  std::vector<std::byte> out;
  out.reserve(state_header_bytes + s.pending.size() * state_entry_bytes);
  put_le(out, state_version, 4);
  put_le(out, s.task, 4);
  put_le(out, s.next_sequence, 8);
  put_le(out, s.pending.size(), 4);
  for (const auto& p : s.pending) {
    put_le(out, p.checkpoint, 8);
    put_le(out, p.sequence, 8);
  }
  return out;
}

io::result<exactly_once_file_sink::state> exactly_once_file_sink::decode_state(std::span<const std::byte> bytes) {
  if (bytes.size() < state_header_bytes) return state_error("truncated (" + std::to_string(bytes.size()) + " bytes)");
  const auto version = get_le(bytes, 0, 4);
  if (version != state_version) {
    return state_error("version " + std::to_string(version) + " is not supported (expected " +
                       std::to_string(state_version) + ")");
  }
  state s;
  s.task = static_cast<snapshot::task_id>(get_le(bytes, 4, 4));
  s.next_sequence = get_le(bytes, 8, 8);
  const auto count = get_le(bytes, 16, 4);
  if (bytes.size() != state_header_bytes + count * state_entry_bytes) {
    return state_error(std::to_string(bytes.size()) + " bytes do not hold the " + std::to_string(count) +
                       " pending files they announce");
  }
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t at = state_header_bytes + i * state_entry_bytes;
    const pending_file p{get_le(bytes, at, 8), get_le(bytes, at + 8, 8)};
    if (p.sequence >= s.next_sequence || (!s.pending.empty() && p.sequence <= s.pending.back().sequence)) {
      return state_error("pending sequence " + std::to_string(p.sequence) + " is out of order or not below the next (" +
                         std::to_string(s.next_sequence) + ")");
    }
    s.pending.push_back(p);
  }
  return s;
}

// ---- names ------------------------------------------------------------------------------------

std::string exactly_once_file_sink::staging_name(snapshot::task_id task, std::uint64_t sequence) {
  return std::string(staging_prefix) + padded(task, task_digits) + "-" + padded(sequence, sequence_digits);
}

std::string exactly_once_file_sink::final_name(snapshot::task_id task, std::uint64_t sequence) {
  return std::string(final_prefix) + padded(task, task_digits) + "-" + padded(sequence, sequence_digits);
}

std::string exactly_once_file_sink::high_water_name(snapshot::task_id task, std::uint64_t next) {
  return std::string(high_water_prefix) + padded(task, task_digits) + "-" + padded(next, sequence_digits);
}

std::string exactly_once_file_sink::staging_dir() const { return dir_ + "/" + std::string(staging_dir_name); }

std::string exactly_once_file_sink::staging_path(std::uint64_t sequence) const {
  return staging_dir() + "/" + staging_name(task_, sequence);
}

std::string exactly_once_file_sink::final_path(std::uint64_t sequence) const {
  return dir_ + "/" + final_name(task_, sequence);
}

// ---- lifecycle --------------------------------------------------------------------------------

exactly_once_file_sink::exactly_once_file_sink(std::string output_dir, snapshot::task_id task)
    : dir_(std::move(output_dir)), task_(task) {
  buffer_.reserve(buffer_bytes);
}

std::vector<exactly_once_file_sink::pending_file> exactly_once_file_sink::pending() const {
  std::vector<pending_file> out;
  out.reserve(pending_.size());
  for (const auto& e : pending_) out.push_back(e.file);
  return out;
}

exactly_once_file_sink::state exactly_once_file_sink::current_state() const {
  return state{task_, next_sequence_, pending()};
}

io::error exactly_once_file_sink::fail(io::error e) {
  if (!failure_) failure_ = e;
  return e;
}

io::error exactly_once_file_sink::failed_error(const char* op) const {
  const std::string what = std::string(op) + " file sink task " + std::to_string(task_) + " in '" + dir_ + "'";
  if (!recovered_) return io::error(std::make_error_code(std::errc::operation_not_permitted), what + ": recover() was not called");
  return io::error(failure_->code(), what + ": the sink failed earlier (" + failure_->message() +
                                         "); recover from the last completed checkpoint");
}

io::result<void> exactly_once_file_sink::clear_earlier_output(const std::string& dir,
                                                              const std::function<bool(std::uint64_t)>& mine) {
  const auto ours = [&mine](std::uint64_t task) { return !mine || mine(task); };
  const std::string area = dir + "/" + std::string(staging_dir_name);
  const bool has_area = io::is_directory_blocking(area);
  std::map<std::uint64_t, std::uint64_t> marks;  // task -> its highest mark
  std::vector<std::string> staged;
  if (has_area) {
    auto area_names = io::list_directory_blocking(area);
    if (!area_names) return area_names.error();
    for (const std::string& name : *area_names) {
      if (const auto p = parse_name(name, high_water_prefix); p && name == high_water_name(p->task, p->sequence)) {
        marks[p->task] = std::max(marks[p->task], p->sequence);
      } else if (const auto q = parse_name(name, staging_prefix); q && name == staging_name(q->task, q->sequence)) {
        if (ours(q->task)) staged.push_back(name);
      }
    }
  }
  auto names = io::list_directory_blocking(dir);
  if (!names) return names.error();
  std::vector<std::string> published;
  for (const std::string& name : *names) {
    const auto p = parse_name(name, final_prefix);
    if (!p || !ours(p->task)) continue;
    const auto mark = marks.find(p->task);
    if (name != final_name(p->task, p->sequence) || mark == marks.end() || p->sequence >= mark->second) {
      return io::error(std::make_error_code(std::errc::file_exists),
                       "output directory '" + dir + "' holds '" + name + "', which this job did not provably write; " +
                           "move it out, or choose an empty or new directory");
    }
    published.push_back(name);
  }
  const auto remove = [](const std::string& path) -> io::result<void> {
    const int rc = runtime::sys().unlink(path.c_str());
    if (rc < 0 && rc != -ENOENT) return io::error::from_errno(-rc, "remove '" + path + "'");
    return io::success();
  };
  for (const std::string& name : published) {
    auto removed = remove(dir + "/" + name);
    if (!removed) return removed;
  }
  for (const std::string& name : staged) {
    auto removed = remove(area + "/" + name);
    if (!removed) return removed;
  }
  if (!published.empty() || !staged.empty()) {
    runtime::log::info("output directory '{}': a fresh start removed {} published and {} staged files of earlier runs",
                       dir, published.size(), staged.size());
  }
  // (Durability of the removals: a crash before the first checkpoint commits leaves at most some of
  // them, which the next fresh start removes again; a checkpoint's publish syncs the directory.)
  return io::success();
}

runtime::task<io::result<void>> exactly_once_file_sink::recover(std::span<const std::byte> state_bytes) {
  call_guard guard(busy_);
  const std::string what = "recover file sink task " + std::to_string(task_) + " in '" + dir_ + "'";
  // Decode before the first suspension: `state_bytes` need not outlive the call.
  state s{task_, 0, {}};
  if (!state_bytes.empty()) {
    auto decoded = decode_state(state_bytes);
    if (!decoded) co_return io::error(decoded.error().code(), what + ": " + decoded.error().message());
    s = std::move(decoded).value();
  }
  if (s.task != task_) {
    co_return io::error(std::make_error_code(std::errc::invalid_argument),
                        what + ": the state belongs to task " + std::to_string(s.task));
  }
  recovered_ = false;
  failure_.reset();
  pending_.clear();
  buffer_.clear();
  if (staging_.is_open()) (void)co_await staging_.close();

  auto made = co_await make_directory_durably(dir_, parent_of(dir_));
  if (!made) co_return made;
  auto area_made = co_await make_directory_durably(staging_dir(), dir_);
  if (!area_made) co_return area_made;

  // readdir, on the executor's blocking-work pool (see the header): once per task, at start-up.
  auto area_names = co_await io::list_directory(staging_dir());
  if (!area_names) co_return area_names.error();
  auto names = co_await io::list_directory(dir_);
  if (!names) co_return names.error();
  // Only names this sink writes, exactly (a hand-made "part-7-3" is not ours).
  const auto ours = [this](const std::string& name, std::string_view prefix, std::uint64_t& sequence) {
    const auto p = parse_name(name, prefix);
    if (!p || p->task != task_) return false;
    sequence = p->sequence;
    return name == std::string(prefix) + padded(task_, task_digits) + "-" + padded(p->sequence, sequence_digits);
  };
  std::set<std::uint64_t> staged;
  std::set<std::uint64_t> marks;
  std::set<std::uint64_t> published;
  for (const auto& name : *area_names) {
    std::uint64_t n = 0;
    if (ours(name, staging_prefix, n)) staged.insert(n);
    if (ours(name, high_water_prefix, n)) marks.insert(n);
  }
  for (const auto& name : *names) {
    std::uint64_t n = 0;
    if (ours(name, final_prefix, n)) published.insert(n);
  }
  // What this task provably wrote here: every sequence below its mark (snapshot() raises the mark
  // before the staged file is durable, so before it can be published), and below the resumed
  // state's next one (its checkpoint vouches for them).
  const std::uint64_t mark = marks.empty() ? 0 : *marks.rbegin();
  const std::uint64_t written_below = std::max(mark, s.next_sequence);

  // Check everything before changing anything.
  for (const auto& p : s.pending) {
    if (!staged.contains(p.sequence) && !published.contains(p.sequence)) {
      co_return io::error(std::make_error_code(std::errc::no_such_file_or_directory),
                          what + ": the pending file of checkpoint " + std::to_string(p.checkpoint) +
                              " has neither its staging file '" + std::string(staging_dir_name) + "/" +
                              staging_name(task_, p.sequence) + "' nor its final file '" +
                              final_name(task_, p.sequence) + "': output was lost");
    }
  }
  if (auto it = published.lower_bound(written_below); it != published.end()) {
    co_return io::error(std::make_error_code(std::errc::file_exists),
                        what + ": '" + final_name(task_, *it) + "' is in the way of this sink's output and was " +
                            "not written by it (task " + std::to_string(task_) + " wrote sequence numbers below " +
                            std::to_string(written_below) + " only); move it out of the output directory");
  }

  bool dir_changed = false;
  bool area_changed = false;
  // Publish what the resumed checkpoint covered: staged files are renamed, published ones kept.
  for (const auto& p : s.pending) {
    if (staged.erase(p.sequence) > 0) {
      auto renamed = co_await io::rename(staging_path(p.sequence), final_path(p.sequence));
      if (!renamed) co_return renamed;
      dir_changed = area_changed = true;
    }
  }
  // Remove output from after the checkpoint, all of it provably this task's: the replay produces it
  // again.
  for (const std::uint64_t sequence : staged) {
    auto removed = co_await io::remove(staging_path(sequence));
    if (!removed) co_return removed;
    area_changed = true;
  }
  for (auto it = published.lower_bound(s.next_sequence); it != published.end() && *it < written_below; ++it) {
    auto removed = co_await io::remove(final_path(*it));
    if (!removed) co_return removed;
    dir_changed = true;
  }
  // One mark per task is enough: the highest (older ones are left by a crash mid-raise).
  for (const std::uint64_t older : marks) {
    if (older == mark) continue;
    auto removed = co_await io::remove(staging_dir() + "/" + high_water_name(task_, older));
    if (!removed) co_return removed;
    area_changed = true;
  }
  if (dir_changed) {
    auto synced = co_await io::fsync_directory(dir_);
    if (!synced) co_return synced;
  }
  if (area_changed) {
    auto synced = co_await io::fsync_directory(staging_dir());
    if (!synced) co_return synced;
  }
  next_sequence_ = s.next_sequence;
  high_water_.reset();
  if (!marks.empty()) high_water_ = mark;
  recovered_ = true;
  co_return io::success();
}

runtime::task<io::result<void>> exactly_once_file_sink::open_staging() {
  const std::uint64_t sequence = next_sequence_;
  auto opened = co_await io::file::open(staging_path(sequence), io::open_options::create_or_truncate());
  if (!opened) co_return std::move(opened).error();
  staging_ = std::move(opened).value();
  staging_sequence_ = sequence;
  staging_offset_bytes_ = 0;
  next_sequence_ = sequence + 1;
  // Its name may be published once a snapshot covers it: the mark must cover it by then. Raised
  // and made durable here, with the file's entry, the snapshot's only durable step is the bytes'.
  auto marked = co_await raise_high_water(sequence + 1);
  if (!marked) co_return marked;
  co_return co_await io::fsync_directory(staging_dir());
}

// Makes the mark say `next` (an empty file renamed from the old mark, or created), not yet durable:
// the caller fsyncs the area.
runtime::task<io::result<void>> exactly_once_file_sink::raise_high_water(std::uint64_t next) {
  if (high_water_ && *high_water_ >= next) co_return io::success();
  const std::string path = staging_dir() + "/" + high_water_name(task_, next);
  if (high_water_) {
    auto renamed = co_await io::rename(staging_dir() + "/" + high_water_name(task_, *high_water_), path);
    if (!renamed) co_return renamed;
  } else {
    auto opened = co_await io::file::open(path, io::open_options::create_or_truncate());
    if (!opened) co_return std::move(opened).error();
    io::file f = std::move(opened).value();
    auto closed = co_await f.close();
    if (!closed) co_return closed;
  }
  high_water_ = next;
  co_return io::success();
}

runtime::task<io::result<void>> exactly_once_file_sink::flush() {
  if (buffer_.empty()) co_return io::success();
  auto written = co_await staging_.write_all(std::as_bytes(std::span<const char>(buffer_)), staging_offset_bytes_);
  if (!written) co_return written;
  staging_offset_bytes_ += buffer_.size();
  buffer_.clear();
  co_return io::success();
}

runtime::task<io::result<void>> exactly_once_file_sink::write(std::string_view line) {
  call_guard guard(busy_);
  if (!recovered_ || failure_) co_return failed_error("write to");
  // Copy first: nothing of `line` is used after a suspension.
  buffer_.insert(buffer_.end(), line.begin(), line.end());
  buffer_.push_back('\n');
  if (!staging_.is_open()) {
    auto opened = co_await open_staging();
    if (!opened) co_return fail(std::move(opened).error());
  }
  if (buffer_.size() >= buffer_bytes) {
    auto flushed = co_await flush();
    if (!flushed) co_return fail(std::move(flushed).error());
  }
  co_return io::success();
}

runtime::task<io::result<std::vector<std::byte>>> exactly_once_file_sink::snapshot(snapshot::checkpoint_id id) {
  call_guard guard(busy_);
  if (!recovered_ || failure_) co_return failed_error("snapshot");
  if (staging_.is_open()) {
    auto flushed = co_await flush();
    if (!flushed) co_return fail(std::move(flushed).error());
    auto synced = co_await staging_.fsync();
    if (!synced) co_return fail(std::move(synced).error());
    auto closed = co_await staging_.close();
    if (!closed) co_return fail(std::move(closed).error());
    // (Its entry and the mark past it were made durable when it was created: open_staging.)
    pending_.push_back({{id, staging_sequence_}, false});
  }
  co_return encode_state(current_state());
}

runtime::task<io::result<void>> exactly_once_file_sink::commit(snapshot::checkpoint_id id) {
  call_guard guard(busy_);
  if (!recovered_) co_return failed_error("commit");
  bool any = false;
  for (auto& e : pending_) {
    if (e.file.checkpoint > id) continue;
    any = true;
    if (e.renamed) continue;
    auto renamed = co_await io::rename(staging_path(e.file.sequence), final_path(e.file.sequence));
    if (!renamed) co_return renamed;  // the rest stay pending; the next commit retries
    e.renamed = true;
  }
  if (!any) co_return io::success();
  // Forget them only once the renames are durable.
  auto synced = co_await io::fsync_directory(dir_);
  if (!synced) co_return synced;
  std::erase_if(pending_, [id](const pending_entry& e) { return e.file.checkpoint <= id && e.renamed; });
  co_return io::success();
}

void exactly_once_file_sink::abort(snapshot::checkpoint_id id) noexcept {
  // Nothing to undo: the files of `id` stay pending and the next completed checkpoint publishes them.
  (void)id;
}

runtime::task<void> exactly_once_file_sink::close() {
  call_guard guard(busy_);
  buffer_.clear();  // after the last snapshot: never published, and recover() deletes the staged file
  if (staging_.is_open()) (void)co_await staging_.close();
}

}  // namespace sluice::dataflow
