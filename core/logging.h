// Public header. Logging through spdlog (header-only), one process-wide logger named "nabla".
// The level comes from NABLA_LOG_LEVEL (trace, debug, info, warn, error, off; default info).
#pragma once

#include <spdlog/spdlog.h>

namespace nabla {
spdlog::logger& logger();
}  // namespace nabla

#define NABLA_LOG_INFO(...) ::nabla::logger().info(__VA_ARGS__)
#define NABLA_LOG_WARN(...) ::nabla::logger().warn(__VA_ARGS__)
#define NABLA_LOG_DEBUG(...) ::nabla::logger().debug(__VA_ARGS__)
