// Planted bugs (see plant.hpp).

#include <sluice/runtime/plant.hpp>

#include <algorithm>

namespace sluice::runtime {

namespace {
#if defined(SLUICE_PLANTS) && SLUICE_PLANTS
constexpr const char* planted[] = {
    "abort-before-start",     // FLINK-17869: an abort removes the result before the start
    "inline-recycle",         // FLINK-22946: a recycle resumes another channel's waiter inline
    "double-recycle",         // FLINK-18050: a buffer is recycled twice
    "obsolete-barrier-loss",  // FLINK-20654: in-flight data lost after an obsolete barrier
    "snapshot-mid-record",    // a snapshot taken in the middle of a record
    "manifest-before-state",  // a commit fsyncs the manifest before the state files
    "queued-barrier-waits",   // issue 33: a queued barrier switches to unaligned only when taken
    "delta-loses-write",      // issue 34: an incremental snapshot leaves out a changed key
    "retention-drops-base",   // issue 34: retention removes a checkpoint a kept one requires
    "emission-cursor-lost",   // issue 34: a recovery mid-emission emits the keys before the cursor again
};
const char* active = nullptr;
#endif
}  // namespace

std::span<const char* const> plants() noexcept {
#if defined(SLUICE_PLANTS) && SLUICE_PLANTS
  return planted;
#else
  return {};
#endif
}

bool plant_known(std::string_view name) noexcept {
  const auto all = plants();
  return std::any_of(all.begin(), all.end(), [&](const char* p) { return name == p; });
}

void set_plant([[maybe_unused]] const char* name) noexcept {
#if defined(SLUICE_PLANTS) && SLUICE_PLANTS
  active = name;
#endif
}

bool plant_active([[maybe_unused]] std::string_view name) noexcept {
#if defined(SLUICE_PLANTS) && SLUICE_PLANTS
  return active != nullptr && name == active;
#else
  return false;
#endif
}

}  // namespace sluice::runtime
