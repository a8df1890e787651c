#pragma once
// The job API: a typed builder for a graph of stages. A stage is a chain of operators that runs as
// `parallelism` stream tasks; records move between operators of one stage by function call (no
// serialization), and between stages through channels: key_by() is a hash exchange (each key to one
// task of the next stage, by a stable hash of its encoding, so the same key goes to the same task
// after a restart).
//
// Key groups (key_group.hpp): a keyed stage (the one key_by feeds) hashes keys into a fixed number
// of key groups, its max parallelism G (default_key_groups, 128, unless set with
// key_by(...).max_parallelism(G)); a key goes to the task that owns its group, task i of P owning
// the contiguous groups key_group_range_of(i, P, G). G is part of the job's identity
// ("key_groups=G"): a checkpoint resumes only with the same G. A stage's parallelism may not exceed
// its G (std::invalid_argument when the graph is built).
//
//   job_builder job("wordcount");
//   auto words = job.read_lines("read", "/data/in.txt", 2)
//                    .flat_map<std::string>([](const std::string& line, emitter<std::string>& out) {...});
//   words.key_by<std::string>([](const std::string& w) { return w; })
//        .aggregate<std::uint64_t, std::string>("count", 2,
//            [](std::uint64_t& n, const std::string&) { ++n; },
//            [](const std::string& w, const std::uint64_t& n) { return w + " " + std::to_string(n); })
//        .write_lines("/data/out", [](const std::string& line) { return line; });
//   job_result r = run_job(job, settings);   // job_runner.hpp
//
// Records crossing a stage boundary need a codec (buffers/codec.hpp).
//
// Identity: every call of the typed API also records what it adds as "key=value" entries
// ("op=flat_map", "window.size=1000", "output=key_by", "write_lines.dir=/data/out"), kept in the
// stream and stored in its stage when a tail closes the chain (stage_def::identity); sources also
// name the files they read (stage_def::inputs). job_fingerprint.hpp turns them into the job's
// fingerprint, which every checkpoint carries. stream::identify() records a parameter of your own.

#include <sluice/buffers/codec.hpp>
#include <sluice/dataflow/combiner.hpp>
#include <sluice/dataflow/connector.hpp>
#include <sluice/dataflow/fanout.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/key_group.hpp>
#include <sluice/dataflow/key_hash.hpp>
#include <sluice/dataflow/operators.hpp>
#include <sluice/dataflow/stage.hpp>
#include <sluice/dataflow/state_ttl.hpp>
#include <sluice/dataflow/task_parts.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::dataflow {

// How a sink behaves beyond what it writes.
struct sink_options {
  // The least time the sink spends on each record (a slow sink, to try backpressure and unaligned
  // checkpoints with: `sluice join --slow-sink-us`). Zero: as fast as it can.
  std::chrono::microseconds per_record_delay{0};
};

template <class T>
class stream;
template <class K, class T>
class keyed_stream;
template <class K, class S, class Out>
class process_context;  // keyed_process.hpp

namespace detail {
// What a stream is: the function that builds its chain in a task, and how many operators or tails
// take it (more than one: the chain is built once per task, into a tee).
template <class T>
struct stream_node {
  std::function<void(task_builder&, collector<T>&)> attach;
  std::size_t uses = 0;
};
template <class T>
void attach_node(const std::shared_ptr<stream_node<T>>& node, task_builder& b, collector<T>& down) {
  if (node->uses <= 1) {
    node->attach(b, down);
    return;
  }
  bool made = false;
  tee_op<T>& tee = b.tee_for<T>(node.get(), made);
  tee.add(down);
  if (made) node->attach(b, tee);
}
}  // namespace detail

class job_builder {
 public:
  explicit job_builder(std::string name) : name_(std::move(name)) {}

  // Lines of a text file; `parallelism` tasks each read a byte range (a line belongs to the range
  // it starts in). Replayable from the byte offset each task stores in the checkpoint.
  stream<std::string> read_lines(std::string name, std::string path, std::size_t parallelism);
  // Lines of a text file in event-time order, time(line) being a line's event time, read like
  // read_lines. Each task sends a watermark after every batch (its latest time - 1: lines of equal
  // time may follow) and its latest time at the end. A line whose time is before the previous one's
  // fails the job (naming the file and byte offset): out-of-order input would be late for windows.
  stream<std::string> read_timed_lines(std::string name, std::string path, std::size_t parallelism,
                                       std::function<std::uint64_t(std::string_view)> time);
  // Generated records: make(n) for n in [0, count) (0: no end), spread over `parallelism` tasks,
  // at most records_per_second in all (0: as fast as the job takes them). Defined in generate.hpp.
  template <class T>
  stream<T> generate(std::string name, std::size_t parallelism, std::uint64_t count,
                     std::function<T(std::uint64_t)> make, double records_per_second = 0);
  // generate() with event time: record n happens at time_of(n), which must not decrease with n.
  // Each task sends a watermark after every batch (time_of of the next n it will make, - 1), so
  // event-time windows downstream fire as the generated time passes.
  template <class T>
  stream<T> generate_timed(std::string name, std::size_t parallelism, std::uint64_t count,
                           std::function<T(std::uint64_t)> make, std::function<std::uint64_t(std::uint64_t)> time_of,
                           double records_per_second = 0);
  // Lines with their 0-based line index as event time (one task; watermarks every 256 lines).
  stream<std::pair<std::uint64_t, std::string>> read_indexed_lines(std::string name, std::string path);
  // Records of a source connector of your own (connector.hpp): `parallelism` tasks, each with an
  // instance spec.make(context) made. The readers above are such connectors (sources.hpp).
  // Defined in connector_parts.hpp.
  template <class T>
  stream<T> read_from(std::string name, std::size_t parallelism, source_spec<T> spec);

  const std::string& name() const noexcept { return name_; }
  std::vector<stage_def>& stages() noexcept { return stages_; }
  const std::vector<stage_def>& stages() const noexcept { return stages_; }
  // The directories the job's sinks write into (write_lines() registers its own, when the graph is
  // built). run_job locks each for the life of the job and refuses one that holds output of another
  // job (job_runner.hpp). A sink of your own that writes files registers its directory here too.
  void add_output_dir(std::string dir) { output_dirs_.push_back(std::move(dir)); }
  const std::vector<std::string>& output_dirs() const noexcept { return output_dirs_; }
  std::size_t add_stage(std::string name, std::size_t parallelism, std::vector<std::size_t> upstreams) {
    if (parallelism == 0) throw std::invalid_argument("stage '" + name + "': parallelism must be at least 1");
    stages_.push_back(stage_def{std::move(name), parallelism, std::move(upstreams), {}, false, {}, {}});
    return stages_.size() - 1;
  }

 private:
  std::string name_;
  std::vector<stage_def> stages_;
  std::vector<std::string> output_dirs_;
};

namespace detail {
// Adds a keyed stage of `key_groups` key groups reading `upstreams`; throws std::invalid_argument
// (naming the stage) for a parallelism above them, before adding anything.
inline std::size_t add_keyed_stage(job_builder& job, std::string name, std::size_t parallelism,
                                   std::vector<std::size_t> upstreams, std::size_t key_groups) {
  check_key_groups(name, parallelism, key_groups);
  const std::size_t stage = job.add_stage(std::move(name), parallelism, std::move(upstreams));
  job.stages()[stage].key_groups = key_groups;
  return stage;
}
}  // namespace detail

template <class T>
class stream {
 public:
  using attach_fn = std::function<void(task_builder&, collector<T>&)>;
  // `identity`: the chain's identity entries so far (see the top of this file).
  stream(job_builder* job, std::size_t stage, attach_fn attach, std::vector<std::string> identity = {})
      : job_(job), stage_(stage), node_(std::make_shared<detail::stream_node<T>>(detail::stream_node<T>{std::move(attach)})),
        identity_(std::move(identity)) {}

  // A stream may be taken by several operators or tails (fan-out): `s.filter(a)` and `s.filter(b)`
  // each get every record of s, which is made once per task (fanout.hpp); branches that end in
  // exchanges share the stage's partition, so one stage can feed several (a key_by stage and a
  // join) or both inputs of one join. A branch that ends in a sink must be the stage's only output.

  template <class U>
  stream<U> map(std::function<U(const T&)> fn) const {
    attach_fn parent = take();
    return stream<U>(job_, stage_, [parent, fn](task_builder& b, collector<U>& down) {
      parent(b, b.make<map_op<T, U>>(fn, down));
    }, identity_with("op=map"));
  }
  // map() for a function written in blocking style: it may call runtime::await(...) (fiber.hpp),
  // for a lookup in a service or a file, say. The stage's operators then run on a fiber: while one
  // waits, the executor runs other tasks, and this task takes nothing else (its barriers and
  // messages wait too, as behind any slow operator). Not in a source stage: put it after
  // key_by(...).partition(...).
  template <class U>
  stream<U> map_blocking(std::function<U(const T&)> fn) const {
    attach_fn parent = take();
    return stream<U>(job_, stage_, [parent, fn](task_builder& b, collector<U>& down) {
      b.run_on_fiber();
      parent(b, b.make<map_op<T, U>>(fn, down));
    }, identity_with("op=map_blocking"));
  }
  stream<T> filter(std::function<bool(const T&)> keep) const {
    attach_fn parent = take();
    return stream<T>(job_, stage_, [parent, keep](task_builder& b, collector<T>& down) {
      parent(b, b.make<filter_op<T>>(keep, down));
    }, identity_with("op=filter"));
  }
  template <class U>
  stream<U> flat_map(std::function<void(const T&, emitter<U>&)> fn) const {
    attach_fn parent = take();
    return stream<U>(job_, stage_, [parent, fn](task_builder& b, collector<U>& down) {
      parent(b, b.make<flat_map_op<T, U>>(fn, down));
    }, identity_with("op=flat_map"));
  }
  template <class K>
  keyed_stream<K, T> key_by(std::function<K(const T&)> key) const {
    return keyed_stream<K, T>(*this, std::move(key));
  }
  // A new stage of `parallelism` tasks taking the records of this stream and of `other` (of the
  // same job; any stages, the same one too: two branches of one stream), each producer task handing
  // its records to the new stage's tasks in turn. The stage's watermark is the least of both
  // inputs' (its gate's), so event-time operators after it see both in time. For records of a key
  // at one task, key_by(...) after it.
  stream<T> union_with(const stream<T>& other, std::string name, std::size_t parallelism) const;
  // Records a parameter of this chain in the job's identity ("key=value" after the operators so
  // far), for what the typed API cannot see, such as a threshold inside a filter's function: a run
  // with another value is then refused to resume this job's checkpoints.
  stream<T> identify(const std::string& key, const std::string& value) const {
    return stream<T>(job_, stage_, node_, identity_with(key + "=" + value));
  }

  // Ends the stage with an exactly-once file sink: each task writes lines (format(record)) into
  // `dir`, published when the checkpoint covering them completes. Defined in sinks.hpp.
  void write_lines(std::string dir, std::function<std::string(const T&)> format, sink_options options = {}) const;

  // Ends the stage with a sink connector of your own (connector.hpp): each task writes through its
  // instance spec.make(context) made, records as they are (W = T) or convert(record) for a sink of
  // another record type. write_lines() is such a connector (file_sink.hpp). W needs a codec (records
  // queued at an unaligned barrier are checkpoint state). Defined in connector_parts.hpp.
  template <class W = T>
  void write_to(sink_spec<W> spec, std::type_identity_t<std::function<W(const T&)>> convert = {},
                sink_options options = {}) const;

  // Ends the stage with lines (format(record)) on standard output (or descriptor `fd`, not owned):
  // for demos, no delivery guarantee (after a recovery, lines since the checkpoint appear again).
  // Defined in generate.hpp.
  void print(std::function<std::string(const T&)> format, int fd = 1) const;

  // Ends the stage with a sink that only counts its records (job_progress::records_written): for
  // benchmarks and dry runs. Defined in generate.hpp.
  void discard() const;

  // Ends this branch of the stage with an exchange into the stage just added that reads this one
  // (the input of a later stage not yet bound, detail::unbound_input): the subpartition for a
  // record is route(record, n), n being that stage's parallelism. `kind` names the exchange in the
  // job's identity ("output=<kind>").
  void close_with_partition(std::function<std::size_t(const T&, std::size_t)> route,
                            const std::string& kind = "partition") const {
    stage_def& stage = job_->stages()[stage_];
    if (stage.sink) detail::check_sink_alone(stage, "an exchange");
    const auto [consumer, input] = detail::unbound_input(job_->stages(), stage_);
    attach_fn attach = take();
    stage_port port;
    port.consumer = consumer;
    port.input = input;
    port.identity = identity_with("output=" + kind);
    port.single = [attach, route](task_builder& b) {
      const std::size_t n = b.downstream_parallelism();
      auto& tail = b.make<partition_tail<T>>(*b.partition(), [route, n](const T& r) { return route(r, n); });
      b.set_output(tail);
      attach(b, tail);
    };
    port.fan = [attach, route](task_builder& b, fanout_tail& tail, std::size_t index, const output_port& range) {
      attach(b, b.make<port_collector<T>>(tail, index, range.first_subpartition, range.parallelism, route));
    };
    stage.ports.push_back(std::move(port));
    detail::close_ports(stage);
  }

  job_builder* job() const noexcept { return job_; }
  std::size_t stage() const noexcept { return stage_; }
  // The attach function of an operator or tail that takes this stream (counted: several make a tee).
  attach_fn take() const {
    ++node_->uses;
    auto node = node_;
    return [node](task_builder& b, collector<T>& down) { detail::attach_node(node, b, down); };
  }
  const std::vector<std::string>& identity() const noexcept { return identity_; }

 private:
  stream(job_builder* job, std::size_t stage, std::shared_ptr<detail::stream_node<T>> node,
         std::vector<std::string> identity)
      : job_(job), stage_(stage), node_(std::move(node)), identity_(std::move(identity)) {}

  std::vector<std::string> identity_with(std::string entry) const {
    std::vector<std::string> out = identity_;
    out.push_back(std::move(entry));
    return out;
  }
  // A sink closes the chain alone: the stage's identity is the chain's entries and the sink's.
  stage_def& close_with_sink(std::vector<std::string> tail) const {
    stage_def& stage = job_->stages()[stage_];
    detail::check_sink_alone(stage, tail.front());
    stage.sink = true;
    stage.identity = identity_;
    stage.identity.insert(stage.identity.end(), tail.begin(), tail.end());
    return stage;
  }

  job_builder* job_;
  std::size_t stage_;
  std::shared_ptr<detail::stream_node<T>> node_;
  std::vector<std::string> identity_;
};

template <class K, class T>
class keyed_stream {
 public:
  keyed_stream(stream<T> up, std::function<K(const T&)> key) : up_(std::move(up)), key_(std::move(key)) {}

  // This keyed stream with max parallelism `groups` for the stage it feeds: the number of key groups
  // its keys are hashed into, the most tasks that stage may ever have (key_group.hpp). Set it above
  // the stage's parallelism from the start: it cannot change across a resume (it is part of the
  // job's identity), and it is what a later rescaling moves state in. Throws std::invalid_argument
  // unless 1 <= groups <= max_key_groups. Of a two-input stage, set it on either input or on both
  // alike.
  //   words.key_by<std::string>(...).max_parallelism(1024).aggregate<...>("count", 4, ...)
  keyed_stream max_parallelism(std::size_t groups) const {
    if (groups == 0 || groups > max_key_groups) {
      throw std::invalid_argument("max_parallelism " + std::to_string(groups) + " is out of range: a keyed stage has 1 to " +
                                  std::to_string(max_key_groups) + " key groups");
    }
    keyed_stream out = *this;
    out.key_groups_ = groups;
    return out;
  }
  // The max parallelism of the stage this stream feeds: as set, else default_key_groups.
  std::size_t max_parallelism() const noexcept { return key_groups_ == 0 ? default_key_groups : key_groups_; }

  // This keyed stream with a state TTL for the stage it feeds (state_ttl.hpp): an aggregate's
  // accumulators, a process's states, a join's records expire a ttl after their key's last write.
  // An event-time TTL needs `time`, the records' event time (throws std::invalid_argument without
  // it). Windows, top-n and window joins drop their state themselves: they refuse one. Of a
  // two-input stage, set a processing-time TTL on either input, an event-time one on both (each
  // with its records' time). Not part of the job's identity.
  //   bids.key_by<std::int64_t>(...).state_ttl(state_ttl::event_time(3'600'000), time_of_bid).aggregate<...>(...)
  keyed_stream state_ttl(dataflow::state_ttl ttl, std::function<std::uint64_t(const T&)> time = {}) const {
    if (ttl.on() && ttl.domain == dataflow::state_ttl::clock::event_time && !time) {
      throw std::invalid_argument("state_ttl " + ttl.describe() + ": an event-time TTL needs the records' event time "
                                  "(state_ttl(ttl, time))");
    }
    keyed_stream out = *this;
    out.ttl_ = {ttl, std::move(time)};
    return out;
  }
  const ttl_spec<T>& ttl() const noexcept { return ttl_; }

  // A new two-input stage: a tumbling event-time window join of this stream (the left input) with
  // `right`, keyed alike. For every left record l and right record r with equal keys whose event
  // times fall in the same window [start, start + size), emit(start, key, l, r) goes downstream
  // when the watermark of both inputs passes the window's end. Defined in join.hpp.
  template <class R, class Out>
  stream<Out> window_join(const keyed_stream<K, R>& right, std::string name, std::size_t parallelism,
                          std::uint64_t size, std::function<std::uint64_t(const T&)> left_time,
                          std::function<std::uint64_t(const R&)> right_time,
                          std::function<Out(std::uint64_t, const K&, const T&, const R&)> emit) const;

  // A new stage: a keyed process operator, user functions with per-key state and event-time timers.
  // on_record(record, ctx) runs for every record, ctx being its key's process_context: ctx.state()
  // (an S, default-constructed on first use; ctx.clear() forgets it, and a key with no state and no
  // timers takes no memory), ctx.emit(out), ctx.timer_at(t) / ctx.cancel_timer(t) (a key's timers,
  // duplicates of one time coalescing) and ctx.watermark() (the largest received, 0 before any).
  // On watermark(t), every timer with time <= t fires first, in time order, ties in key order:
  // on_timer(time, ctx), which may emit, change the state and set timers (one for a time <= t fires
  // in the same pass); then the watermark goes downstream. A timer set for a time the watermark has
  // already reached fires at the next watermark (whatever its time) or at the end. At the end of the
  // input every remaining timer fires in time order (ctx.watermark() is then
  // process_context::end_of_input, timers set meanwhile fire too), then end_of_data goes on.
  // States and timers are operator state in every checkpoint (keys in order: deterministic bytes).
  // on_timer may be empty (timers then do nothing). S must have a codec. Identity: "op=process".
  // Defined in keyed_process.hpp.
  template <class S, class Out>
  stream<Out> process(std::string name, std::size_t parallelism,
                      std::function<void(const T&, process_context<K, S, Out>&)> on_record,
                      std::function<void(std::uint64_t, process_context<K, S, Out>&)> on_timer = {}) const;
  // process() on two inputs keyed alike, this stream the left: a new two-input stage (one gate, the
  // left input's channels first; its watermark the smallest over both inputs' channels, as for
  // window_join). on_left(l, ctx) and on_right(r, ctx) share the key's state and timers; on_timer
  // as for process(). Identity: "op=process_with". Defined in keyed_process.hpp.
  template <class R, class S, class Out>
  stream<Out> process_with(const keyed_stream<K, R>& right, std::string name, std::size_t parallelism,
                           std::function<void(const T&, process_context<K, S, Out>&)> on_left,
                           std::function<void(const R&, process_context<K, S, Out>&)> on_right,
                           std::function<void(std::uint64_t, process_context<K, S, Out>&)> on_timer = {}) const;
  // A regular inner join without a window (process_with underneath): every left and right record is
  // kept, per key, for the rest of the job, and each arriving record emits emit(key, l, r) with
  // every record of its key already held on the other side, in their arrival order. So each pair of
  // equal-key records comes out exactly once, whichever arrives first; the state only grows.
  // Identity: "op=join", "join.kind=inner". Defined in keyed_process.hpp.
  template <class R, class Out>
  stream<Out> join(const keyed_stream<K, R>& right, std::string name, std::size_t parallelism,
                   std::function<Out(const K&, const T&, const R&)> emit) const;

  const stream<T>& upstream() const noexcept { return up_; }
  const std::function<K(const T&)>& key() const noexcept { return key_; }
  // Ends the upstream stage with a partition that sends each record to the task of the next stage
  // (of n) that owns its key's group of `groups`: owner_of(key_group_of(key, groups), n, groups).
  void close_by_key(std::size_t groups) const {
    auto key = key_;
    up_.close_with_partition([key, groups](const T& r, std::size_t n) {
      return owner_of(key_group_of(key(r), groups), n, groups);
    }, "key_by");
  }

  // A new stage of `parallelism` tasks that takes the records as they come, each key's records at
  // one task: stateless operators chained after it (map, filter, ...) run there.
  stream<T> partition(std::string name, std::size_t parallelism) const {
    refuse_ttl("partition", name);
    const std::size_t stage = exchange(std::move(name), parallelism);
    return stream<T>(up_.job(), stage, [](task_builder& b, collector<T>& down) { b.set_input(b.make<gate_input<T>>(down)); },
                     keyed_identity(stage, {"op=partition"}));
  }

  // Local pre-aggregation on the upstream stage (a combiner, combiner.hpp): each upstream task folds
  // its records per key into a partial accumulator and sends (key, partial) pairs on instead of the
  // records, keyed alike: at every checkpoint (before the barrier), before a watermark, at the end
  // of the input, and whenever its table holds max_keys keys. Follow it with an aggregate whose fold
  // merges partials; the results are those of the aggregate without the combiner:
  //   .key_by<std::string>(...).combine<std::uint64_t>([](std::uint64_t& n, const std::string&) { ++n; })
  //   .aggregate<std::uint64_t, Out>("count", 2, [](std::uint64_t& n, const auto& p) { n += p.second; }, ...)
  template <class Acc>
  keyed_stream<K, std::pair<K, Acc>> combine(std::function<void(Acc&, const T&)> fold,
                                             std::size_t max_keys = default_combine_keys) const {
    using partial = std::pair<K, Acc>;
    using op = combine_op<K, T, Acc>;
    if (max_keys == 0) throw std::invalid_argument("combine: max_keys must be at least 1");
    auto parent = up_.take();
    auto key = key_;
    std::vector<std::string> identity = up_.identity();
    identity.push_back("op=combine");
    stream<partial> partials(up_.job(), up_.stage(), [parent, key, fold, max_keys](task_builder& b, collector<partial>& down) {
      auto& c = b.make<op>(typename op::functions{key, fold}, max_keys, down);
      b.add_flushable(c);
      parent(b, c);
    }, std::move(identity));
    keyed_stream<K, partial> out(std::move(partials), [](const partial& p) { return p.first; });
    out.key_groups_ = key_groups_;  // the max parallelism and TTL set before combine() hold after it
    if (ttl_.ttl.on() && ttl_.ttl.domain == dataflow::state_ttl::clock::event_time) {
      throw std::invalid_argument("combine: an event-time state_ttl is on the records, not on the partial "
                                  "accumulators combine() sends; set a processing-time one, or none");
    }
    out.ttl_.ttl = ttl_.ttl;
    return out;
  }
  static constexpr std::size_t default_combine_keys = 16384;

  // A new stage of `parallelism` tasks: every record's key folds into its accumulator; at the end of
  // the input each key's emit(key, acc) goes downstream.
  template <class Acc, class Out>
  stream<Out> aggregate(std::string name, std::size_t parallelism, std::function<void(Acc&, const T&)> fold,
                        std::function<Out(const K&, const Acc&)> emit) const {
    const std::size_t stage = exchange(std::move(name), parallelism);
    auto key = key_;
    return stream<Out>(up_.job(), stage, [key, fold, emit, ttl = ttl_](task_builder& b, collector<Out>& down) {
      using op = keyed_aggregate<K, T, Acc, Out>;
      auto& agg = b.make<op>(typename op::functions{key, fold, emit}, down, b.key_groups(), ttl);
      b.add_state(agg);
      b.add_stepped_end(agg);
      b.set_input(b.make<gate_input<T>>(agg));
    }, keyed_identity(stage, {"op=aggregate"}));
  }

  // A new stage: tumbling event-time windows of `size` (time(record) is the event time); each
  // window's emit(window_start, key, acc) goes downstream when the watermark passes its end.
  // options.allowed_lateness L: a fired window keeps its state until the watermark passes its end
  // by L; a record for it meanwhile updates it and emits emit(window_start, key, acc) again at once
  // (a late firing); a record later than that is dropped and counted. windows.hpp has the details.
  // Throws std::invalid_argument for size 0. Identity: op=window, window.kind=tumbling,
  // window.size=N, and window.lateness=L when L is not 0.
  template <class Acc, class Out>
  stream<Out> window(std::string name, std::size_t parallelism, std::uint64_t size,
                     std::function<std::uint64_t(const T&)> time, std::function<void(Acc&, const T&)> fold,
                     std::function<Out(std::uint64_t, const K&, const Acc&)> emit, window_options options = {}) const {
    detail::check_window("tumbling", size, size);
    refuse_ttl("window", name);
    const std::size_t stage = exchange(std::move(name), parallelism);
    auto key = key_;
    return stream<Out>(up_.job(), stage, [size, time, key, fold, emit, options](task_builder& b, collector<Out>& down) {
      using op = tumbling_window_aggregate<K, T, Acc, Out>;
      auto& win = b.make<op>(size, typename op::functions{time, key, fold, emit}, down, options, b.key_groups());
      b.add_state(win);
      b.set_input(b.make<gate_input<T>>(win));
    }, keyed_identity(stage, detail::window_identity(size, size, options, true)));
  }

  // A new stage: sliding event-time windows [s, s + size) for every s that is a multiple of
  // `slide` (aligned to 0, as Flink's HOP; none starts below 0): a record folds into every window
  // holding its time (size / slide of them when slide divides size), and each window's
  // emit(window_start, key, acc) goes downstream, keys in key order and windows oldest first, when
  // the watermark reaches window_start + size - 1 (or the input ends). options.allowed_lateness as
  // for window(). Throws std::invalid_argument (naming the values) unless 1 <= slide <= size.
  // Identity: op=window, window.kind=sliding, window.size=N, window.slide=S, window.lateness=L.
  template <class Acc, class Out>
  stream<Out> sliding_window(std::string name, std::size_t parallelism, std::uint64_t size, std::uint64_t slide,
                             std::function<std::uint64_t(const T&)> time, std::function<void(Acc&, const T&)> fold,
                             std::function<Out(std::uint64_t, const K&, const Acc&)> emit,
                             window_options options = {}) const {
    detail::check_window("sliding", size, slide);
    refuse_ttl("sliding window", name);
    const std::size_t stage = exchange(std::move(name), parallelism);
    auto key = key_;
    return stream<Out>(up_.job(), stage, [size, slide, time, key, fold, emit, options](task_builder& b,
                                                                                        collector<Out>& down) {
      using op = sliding_window_aggregate<K, T, Acc, Out>;
      auto& win = b.make<op>(size, slide, typename op::functions{time, key, fold, emit}, down, options, b.key_groups());
      b.add_state(win);
      b.set_input(b.make<gate_input<T>>(win));
    }, keyed_identity(stage, detail::window_identity(size, slide, options, false)));
  }

  // A new stage: per-window top-N. The records are keyed by their window (the window start an
  // upstream window emitted, say) and time(record) is their event time (for a window's result its
  // last instant, window_start + size - 1). Each key's records are held until the watermark reaches
  // their time (or the input ends); then, keys in key order, emit(key, place, record) goes
  // downstream for every record whose rank(record) is among the n highest, ties at the n-th place
  // included (n = 1: every record of the greatest rank), by rank descending, equal ranks by
  // ascending record (operator<, else its codec bytes); place is 1 + the number ranked higher.
  // Only records that can still be in the top n are held. Records of a key with different times
  // are ranked apart; a record behind the watermark is dropped and counted. Throws
  // std::invalid_argument for n 0. Identity: op=top_n, top_n.n=N. windows.hpp has the details.
  // Rank is std::int64_t unless named: top_n<Out, double>(...).
  template <class Out, std::totally_ordered Rank = std::int64_t>
  stream<Out> top_n(std::string name, std::size_t parallelism, std::size_t n,
                    std::function<std::uint64_t(const T&)> time,
                    std::function<std::type_identity_t<Rank>(const T&)> rank,
                    std::function<Out(const K&, std::size_t, const T&)> emit) const {
    if (n == 0) throw std::invalid_argument("top_n: n must be at least 1");
    refuse_ttl("top_n", name);
    const std::size_t stage = exchange(std::move(name), parallelism);
    auto key = key_;
    return stream<Out>(up_.job(), stage, [n, time, key, rank, emit](task_builder& b, collector<Out>& down) {
      using op = top_n_op<K, T, Rank, Out>;
      auto& top = b.make<op>(n, typename op::functions{key, time, rank, emit}, down, b.key_groups());
      b.add_state(top);
      b.set_input(b.make<gate_input<T>>(top));
    }, keyed_identity(stage, {"op=top_n", "top_n.n=" + std::to_string(n)}));
  }

 private:
  template <class, class>
  friend class keyed_stream;

  // A new keyed stage reading this stream, its exchange closed into it.
  std::size_t exchange(std::string name, std::size_t parallelism) const {
    const std::size_t stage =
        detail::add_keyed_stage(*up_.job(), std::move(name), parallelism, {up_.stage()}, max_parallelism());
    close_by_key(max_parallelism());
    return stage;
  }
  // A new two-input keyed stage reading this stream (input 0) and `right` (input 1), both exchanges
  // closed into it with the one max parallelism the two set (or the default).
  template <class R>
  std::size_t exchange_with(const keyed_stream<K, R>& right, std::string name, std::size_t parallelism) const {
    if (key_groups_ != 0 && right.key_groups_ != 0 && key_groups_ != right.key_groups_) {
      throw std::invalid_argument("stage '" + name + "': its inputs set max parallelism " + std::to_string(key_groups_) +
                                  " and " + std::to_string(right.key_groups_) +
                                  "; a two-input stage has one (set it on one input, or on both alike)");
    }
    const std::size_t groups = key_groups_ != 0 ? key_groups_ : right.max_parallelism();
    const std::size_t stage = detail::add_keyed_stage(*up_.job(), std::move(name), parallelism,
                                                      {up_.stage(), right.upstream().stage()}, groups);
    close_by_key(groups);
    right.close_by_key(groups);
    return stage;
  }
  // For an operator whose state ends by itself (windows, top-n, a partition): a TTL is a mistake.
  void refuse_ttl(const char* op, const std::string& name) const {
    if (ttl_.ttl.on()) {
      throw std::invalid_argument(std::string(op) + " '" + name + "': a state_ttl (" + ttl_.ttl.describe() +
                                  ") applies to aggregate, process, process_with and join; this operator drops "
                                  "its state itself");
    }
  }
  // A keyed stage's identity: its key groups, then its operator's entries.
  std::vector<std::string> keyed_identity(std::size_t stage, std::vector<std::string> entries) const {
    entries.insert(entries.begin(), "key_groups=" + std::to_string(up_.job()->stages()[stage].key_groups));
    return entries;
  }

  stream<T> up_;
  std::function<K(const T&)> key_;
  std::size_t key_groups_ = 0;  // 0: not set (default_key_groups)
  ttl_spec<T> ttl_;             // off unless set
};

template <class T>
stream<T> stream<T>::union_with(const stream<T>& other, std::string name, std::size_t parallelism) const {
  if (job_ != other.job_) throw std::invalid_argument("union '" + name + "': both streams must be of one job");
  const std::size_t stage = job_->add_stage(std::move(name), parallelism, {stage_, other.stage_});
  // Each task's copy of the route keeps its own turn.
  const auto in_turn = [next = std::size_t{0}](const T&, std::size_t n) mutable { return next++ % n; };
  close_with_partition(in_turn, "rebalance");
  other.close_with_partition(in_turn, "rebalance");
  return stream<T>(job_, stage, [](task_builder& b, collector<T>& down) { b.set_input(b.make<gate_input<T>>(down)); },
                   {"op=union"});
}

}  // namespace sluice::dataflow
