// Command-line flags for the examples (train_gpt, train_llama): a table from each flag to what it
// sets, read in order. Kept this small on purpose, so that an example reads top to bottom with no
// argument library; a bad value names its flag and what was given ("--steps needs a whole
// number, got '3k'"), never a bare "stoll".
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace examples {

class Flags {
 public:
  // `program`: the example's source file, named in the unknown-flag error.
  Flags(int argc, char** argv, std::string program)
      : argc_(argc), argv_(argv), program_(std::move(program)) {}

  // Runs each flag's action in command-line order; actions read their value with the readers below.
  void parse(const std::map<std::string, std::function<void()>>& actions) {
    for (i_ = 1; i_ < argc_; ++i_) {
      const auto it = actions.find(argv_[i_]);
      if (it == actions.end()) {
        throw std::invalid_argument(std::string("unknown flag ") + argv_[i_] + " (see the top of " +
                                    program_ + ")");
      }
      it->second();
    }
  }

  // The current flag's value: the next argument.
  std::string text() {
    if (i_ + 1 >= argc_) throw std::invalid_argument(std::string(argv_[i_]) + " needs a value");
    return argv_[++i_];
  }

  int64_t whole() {
    const std::string flag = argv_[i_], v = text();
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno == ERANGE) {
      throw std::invalid_argument(flag + " needs a whole number, got '" + v + "'");
    }
    return n;
  }

  double real() {
    const std::string flag = argv_[i_], v = text();
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x)) {
      throw std::invalid_argument(flag + " needs a finite number, got '" + v + "'");
    }
    return x;
  }

 private:
  int argc_;
  char** argv_;
  std::string program_;
  int i_ = 1;
};

}  // namespace examples
