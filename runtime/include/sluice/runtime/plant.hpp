#pragma once
// Planted bugs: build switches that each put back one known bug class, so that `sluice simulate
// --plant NAME` can show the simulation finds it (docs/simulation.md lists them). They are compiled
// in only with -DSLUICE_PLANTS=ON (CI's simulation step); in every other build SLUICE_PLANTED(name)
// is the constant false, and plants() is empty.
//
//   if (SLUICE_PLANTED("double-recycle")) give_back(segment);  // the bug, when planted

#include <span>
#include <string_view>

namespace sluice::runtime {

// The planted bugs this build has (empty without SLUICE_PLANTS).
std::span<const char* const> plants() noexcept;
bool plant_known(std::string_view name) noexcept;
// Switches one planted bug on for this process (before any executor starts; a copy per process).
void set_plant(const char* name) noexcept;
bool plant_active(std::string_view name) noexcept;

}  // namespace sluice::runtime

#if defined(SLUICE_PLANTS) && SLUICE_PLANTS
#define SLUICE_PLANTED(name) (::sluice::runtime::plant_active(name))
#else
#define SLUICE_PLANTED(name) false
#endif
