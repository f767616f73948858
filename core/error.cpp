#include "nabla/core/error.h"

#include <cstring>

namespace nabla::detail {

namespace {
const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void throw_check_failure(const char* file, int line, const std::string& message) {
  // User errors lead with the message; the source location helps bug reports without dominating.
  throw Error(fmt::format("{} ({}:{})", message, base_name(file), line));
}

void throw_assert_failure(const char* cond, const char* file, int line, const std::string& message) {
  throw Error(fmt::format(
      "internal error: assertion `{}` failed at {}:{}{}{} -- this is a bug in nabla, please report it", cond,
      base_name(file), line, message.empty() ? "" : ": ", message));
}

}  // namespace nabla::detail
