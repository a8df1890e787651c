# Helpers that turn a folder laid out as docs/design.md describes into a library.
#
#   <name>/include/sluice/<name>/*.hpp   public headers (installed)
#   <name>/src/*.cpp                     sources, plus private headers
#
# sluice_add_module(<name> [deps...]) creates the static library
# sluice_<name>, its alias sluice::<name>, links it into sluice::sluice and
# installs it as the package's component <name> (its own targets file). A dep is either another module's name (io -> sluice::io) or an
# imported target written with its namespace (fmt::fmt). Files are globbed
# with CONFIGURE_DEPENDS, so adding a source file needs no CMake edit.

include_guard(GLOBAL)

# Warnings, as PRIVATE options of our own targets only: they never leak to
# consumers of the installed package, nor to third-party code.
function(sluice_target_defaults target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE
      -Wall -Wextra -Wno-missing-field-initializers
      $<$<BOOL:${SLUICE_WERROR}>:-Werror>)
  endif()
endfunction()

function(sluice_add_module name)
  set(dir "${PROJECT_SOURCE_DIR}/${name}")
  file(GLOB sources CONFIGURE_DEPENDS "${dir}/src/*.cpp")
  if(NOT sources)
    message(FATAL_ERROR
      "sluice module '${name}': no sources in ${dir}/src/*.cpp. "
      "Every module needs at least one .cpp file.")
  endif()

  set(target sluice_${name})
  add_library(${target} STATIC ${sources})
  add_library(sluice::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES
    EXPORT_NAME ${name}
    POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target}
    PUBLIC
      "$<BUILD_INTERFACE:${dir}/include>"
      "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>"
    PRIVATE
      "${dir}/src")

  foreach(dep IN LISTS ARGN)
    if(dep MATCHES "::")
      target_link_libraries(${target} PUBLIC ${dep})
    elseif(TARGET sluice_${dep})
      target_link_libraries(${target} PUBLIC sluice::${dep})
    else()
      message(FATAL_ERROR
        "sluice module '${name}': dependency '${dep}' is neither a module "
        "declared earlier nor a namespaced imported target (like fmt::fmt).")
    endif()
  endforeach()

  # C++20 travels with the target: a consumer that does not set CMAKE_CXX_STANDARD still compiles
  # the headers (coroutines) as C++20.
  target_compile_features(${target} PUBLIC cxx_std_20)
  sluice_target_defaults(${target})
  target_link_libraries(sluice_all INTERFACE ${target})

  # One export set, and one installed targets file, per module: the package's components
  # (find_package(sluice COMPONENTS runtime io)); sluiceConfig.cmake loads a component's targets
  # after those of the modules it depends on, and looks for its third-party dependencies only.
  install(TARGETS ${target} EXPORT sluice-${name}-targets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT sluice-${name}-targets
    NAMESPACE sluice::
    FILE sluice-${name}-targets.cmake
    DESTINATION "${SLUICE_INSTALL_CMAKEDIR}")
  # OPTIONAL: a module may not have public headers yet.
  install(DIRECTORY "${dir}/include/"
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    OPTIONAL
    FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")

  set_property(GLOBAL APPEND PROPERTY SLUICE_MODULES ${name})
endfunction()
