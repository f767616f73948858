// Public header. Errors: user mistakes versus internal bugs.
//
// NABLA_CHECK(cond, fmt, args...) is for what a user can get wrong (a bad shape, dtype, device
// or option). It throws nabla::Error whose message says what was expected and what was given.
// NABLA_ASSERT(cond, ...) is for nabla's own invariants; a failure is a bug in nabla.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace nabla {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown when a device allocation cannot be satisfied even after freeing cached blocks.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* file, int line, const std::string& message);
[[noreturn]] void throw_assert_failure(const char* cond, const char* file, int line,
                                       const std::string& message);
}  // namespace detail

}  // namespace nabla

#define NABLA_CHECK(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      ::nabla::detail::throw_check_failure(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    }                                                                                       \
  } while (0)

#define NABLA_ASSERT(cond, ...)                                                                        \
  do {                                                                                                 \
    if (!(cond)) [[unlikely]] {                                                                        \
      ::nabla::detail::throw_assert_failure(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                                  \
  } while (0)
