// Seeded mutations of a valid input, for the CTest runs of the fuzz bodies (the libFuzzer targets
// explore further; these keep every body exercised in CI with the regular compiler). Each call
// applies one kind, chosen by `step`, so a loop over steps covers every kind evenly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

namespace nabla::fuzz {

inline std::string mutate(const std::string& valid, int step, std::mt19937_64& rng) {
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  std::string bytes = valid;
  switch (step % 5) {
    case 0:  // byte flips anywhere
      for (size_t k = 0, n = 1 + below(8); k < n && !bytes.empty(); ++k) {
        bytes[below(bytes.size())] = static_cast<char>(rng());
      }
      break;
    case 1:  // truncation
      bytes.resize(below(bytes.size()));
      break;
    case 2:  // flips in the first 32 bytes, where headers and lengths live
      for (size_t k = 0, n = 1 + below(3); k < n && !bytes.empty(); ++k) {
        bytes[below(std::min<size_t>(32, bytes.size()))] = static_cast<char>(rng());
      }
      break;
    case 3:  // inserted bytes
      bytes.insert(below(bytes.size() + 1), std::string(1 + below(16), static_cast<char>(rng())));
      break;
    default:  // a span copied over another place (repeats structure, as libFuzzer's CopyPart)
      if (bytes.size() > 2) {
        const size_t from = below(bytes.size()), to = below(bytes.size());
        const size_t n = 1 + below(std::min(bytes.size() - from, bytes.size() - to));
        bytes.replace(to, n, valid.substr(from, n));
      }
      break;
  }
  return bytes;
}

}  // namespace nabla::fuzz
