#pragma once
// Every librdkafka handle of the kafka module starts from new_conf(): its log lines go to sluice's
// log (runtime/log.hpp) instead of straight to stderr, so SLUICE_LOG and a host's log sink govern
// them too. librdkafka logs a broker it cannot reach at its "error" levels while it retries, so
// those become warnings; its notices are info, the rest debug.
#include <sluice/runtime/log.hpp>

#include <librdkafka/rdkafka.h>

namespace sluice::kafka::detail {

inline rd_kafka_conf_t* new_conf() {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t* rk, int level, const char* facility, const char* text) {
    const runtime::log_level at = level <= 4 ? runtime::log_level::warn
                                  : level == 5 ? runtime::log_level::info
                                               : runtime::log_level::debug;
    if (!runtime::log::enabled(at)) return;
    runtime::log::at(at, "kafka {} {}: {}", rd_kafka_name(rk), facility, text);
  });
  return conf;
}

}  // namespace sluice::kafka::detail
