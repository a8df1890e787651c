#include <sluice/dataflow/version.hpp>
