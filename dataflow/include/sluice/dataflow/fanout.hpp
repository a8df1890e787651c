#pragma once
// Fan-out: one stream feeding several operators or stages.
//
// In a chain, a stream that several operators take (stream::map twice, say) is built once per task
// and handed to them by a tee_op: every record, watermark and end of input goes to each, in the order
// they were attached. At the stage's end, a stream whose branches close into several exchanges (two
// key_by stages, or both inputs of one join) has one partition for them all: fanout_tail, with one
// port_collector per exchange, each routing into its port's range of subpartitions (job_plan.hpp:
// output_port). Records of all ports share one queue, so their order out of the task is the order
// they were made. A watermark goes out once every port still open has passed it (the least over the
// ports' latest watermarks), and the end of input once every port has ended: each branch signals
// both, so the task's output sends each once, and never ahead of a branch's records.

#include <sluice/dataflow/collector.hpp>
#include <sluice/dataflow/task_parts.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

namespace sluice::dataflow {

template <class T>
class tee_op final : public collector<T>, public chain_part {
 public:
  void add(collector<T>& out) { outs_.push_back(&out); }
  void collect(const T& record) override {
    for (collector<T>* out : outs_) out->collect(record);
  }
  void watermark(std::uint64_t t) override {
    for (collector<T>* out : outs_) out->watermark(t);
  }
  void end_of_data() override {
    for (collector<T>* out : outs_) out->end_of_data();
  }
  std::size_t outputs() const noexcept { return outs_.size(); }

 private:
  std::vector<collector<T>*> outs_;
};

// The task's output when its stage feeds several exchanges (defined in fanout_tail.cpp).
class fanout_tail final : public queued_output {
 public:
  fanout_tail(buffers::result_partition& partition, std::size_t ports);

  template <class T>
  void record(const T& r, std::size_t subpartition) {
    push_record(r, subpartition);
  }
  void port_watermark(std::size_t port, std::uint64_t time);
  void port_end(std::size_t port);

 private:
  void forward_watermark();

  std::vector<std::optional<std::uint64_t>> marks_;  // each port's latest watermark
  std::vector<bool> ended_;
  std::size_t open_ports_;
  std::optional<std::uint64_t> sent_;  // the latest watermark sent
};

// One port of a fanout_tail: records to subpartition first + route(record, parallelism).
template <class T>
class port_collector final : public collector<T>, public chain_part {
 public:
  using route_fn = std::function<std::size_t(const T&, std::size_t)>;
  port_collector(fanout_tail& tail, std::size_t port, std::size_t first, std::size_t parallelism, route_fn route)
      : tail_(&tail), port_(port), first_(first), parallelism_(parallelism), route_(std::move(route)) {}
  void collect(const T& record) override { tail_->record(record, first_ + route_(record, parallelism_)); }
  void watermark(std::uint64_t t) override { tail_->port_watermark(port_, t); }
  void end_of_data() override { tail_->port_end(port_); }

 private:
  fanout_tail* tail_;
  std::size_t port_;
  std::size_t first_;
  std::size_t parallelism_;
  route_fn route_;
};

}  // namespace sluice::dataflow
