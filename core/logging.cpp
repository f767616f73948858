#include "nabla/core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace nabla {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("nabla");
    l->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    const char* level = std::getenv("NABLA_LOG_LEVEL");
    l->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
    return l;
  }();
  return *instance;
}

}  // namespace nabla
