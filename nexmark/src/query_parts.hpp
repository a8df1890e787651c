#pragma once
// What the queries share (private to nexmark/src): the generated events as a source stage, their
// bids, persons and auctions, and where a query's rows go.

#include <sluice/nexmark/queries.hpp>

#include <sluice/dataflow/job.hpp>

#include <string>

namespace sluice::nexmark::detail {

// The generated events, with every generator setting in the job's identity: a resume with another
// rate, base time, first event, size or ratio would be another stream, and is refused.
dataflow::stream<event> events_of(dataflow::job_builder& job, const query_spec& spec);

dataflow::stream<bid> bids_of(const dataflow::stream<event>& events);
dataflow::stream<person> persons_of(const dataflow::stream<event>& events);
dataflow::stream<auction> auctions_of(const dataflow::stream<event>& events);

// The rows into the spec's output directory (exactly once), or only counted without one.
void rows_to(const dataflow::stream<std::string>& rows, const query_spec& spec);

// Event times as the job API takes them (epoch ms, never negative for generated events).
inline std::uint64_t time_of(std::int64_t ms) { return static_cast<std::uint64_t>(ms); }

void build_q3(dataflow::job_builder& job, const query_spec& spec);
void build_q4(dataflow::job_builder& job, const query_spec& spec);
void build_q5(dataflow::job_builder& job, const query_spec& spec);
void build_q7(dataflow::job_builder& job, const query_spec& spec);
void build_q8(dataflow::job_builder& job, const query_spec& spec);

}  // namespace sluice::nexmark::detail
