# Finds the http-parser C library (nodejs/http-parser; Debian: libhttp-parser-dev), which ships no
# CMake or pkg-config file. Defines HttpParser::HttpParser and HttpParser_FOUND.
#
#   find_package(HttpParser REQUIRED)
#   target_link_libraries(x PRIVATE HttpParser::HttpParser)

include_guard(GLOBAL)

find_path(HttpParser_INCLUDE_DIR http_parser.h)
find_library(HttpParser_LIBRARY NAMES http_parser)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(HttpParser
  REQUIRED_VARS HttpParser_LIBRARY HttpParser_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "install http-parser (on Debian/Ubuntu: apt-get install libhttp-parser-dev)")

if(HttpParser_FOUND AND NOT TARGET HttpParser::HttpParser)
  add_library(HttpParser::HttpParser UNKNOWN IMPORTED)
  set_target_properties(HttpParser::HttpParser PROPERTIES
    IMPORTED_LOCATION "${HttpParser_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${HttpParser_INCLUDE_DIR}")
endif()
mark_as_advanced(HttpParser_INCLUDE_DIR HttpParser_LIBRARY)
