// Helpers shared by the image tests: a scratch directory, file I/O, and the Python reference
// (tests/data/image_reference.py, run by /usr/bin/python3 with PIL, torch and torchvision).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace nabla::testing {

// A fresh directory under the system temp dir, removed with the object.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "nabla_image_test_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// True when /usr/bin/python3 can import PIL and torchvision (so the references can be made).
inline bool have_torchvision() {
  static const bool available =
      std::system("/usr/bin/python3 -c 'import PIL, torchvision' >/dev/null 2>&1") == 0;
  return available;
}

// Runs tests/data/image_reference.py with `args`; fails the test if it does not succeed.
inline void run_image_reference(const std::string& args) {
  std::string script = (std::filesystem::path(__FILE__).parent_path() / "image_reference.py").string();
  std::string command = "/usr/bin/python3 " + script + " " + args;
  ASSERT_EQ(std::system(command.c_str()), 0) << "reference script failed: " << command;
}

#define NABLA_REQUIRE_TORCHVISION()                                                                \
  do {                                                                                             \
    if (!::nabla::testing::have_torchvision()) {                                                   \
      GTEST_SKIP() << "needs /usr/bin/python3 with PIL and torchvision for the reference outputs"; \
    }                                                                                              \
  } while (0)

// Runs torchvision jobs (see image_reference.py, "transforms") on a raw (height, width, 3) image
// and returns each job's output bytes.
inline std::vector<std::vector<uint8_t>> torchvision_outputs(const std::vector<uint8_t>& image,
                                                             int64_t height, int64_t width,
                                                             const std::vector<std::string>& jobs) {
  ScratchDir dir;
  write_bytes(dir / "input.raw", image);
  {
    std::ofstream spec(dir / "jobs.json");
    spec << "{\"input\": \"" << (dir / "input.raw") << "\", \"height\": " << height
         << ", \"width\": " << width << ", \"jobs\": [";
    for (size_t k = 0; k < jobs.size(); ++k) {
      spec << (k ? ", " : "") << "{" << jobs[k] << ", \"out\": \"" << (dir / std::to_string(k)) << "\"}";
    }
    spec << "]}";
  }
  std::vector<std::vector<uint8_t>> outputs;
  run_image_reference("transforms " + (dir / "jobs.json"));
  for (size_t k = 0; k < jobs.size(); ++k) outputs.push_back(read_bytes(dir / std::to_string(k)));
  return outputs;
}

// Largest and mean absolute difference of two byte arrays of the same length.
struct ByteDiff {
  int max = 0;
  double mean = 0;
};
inline ByteDiff byte_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  ByteDiff d;
  if (a.size() != b.size() || a.empty()) return {.max = 256, .mean = 256};
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int diff = std::abs(int(a[i]) - int(b[i]));
    d.max = std::max(d.max, diff);
    sum += diff;
  }
  d.mean = sum / static_cast<double>(a.size());
  return d;
}

}  // namespace nabla::testing
