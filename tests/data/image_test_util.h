// Helpers shared by the image tests: a scratch directory, file I/O, and the Python reference
// (tests/data/image_reference.py, run by /usr/bin/python3 with PIL, torch and torchvision).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "test_paths.h"

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

// True when /usr/bin/python3 has PIL and torchvision (so the references can be made). Looks the
// modules up without importing them: importing torchvision costs ~2 s, in every test process.
inline bool have_torchvision() {
  static const bool available =
      std::system(
          "/usr/bin/python3 -c 'import importlib.util as u, sys; "
          "sys.exit(0 if u.find_spec(\"PIL\") and u.find_spec(\"torchvision\") else 1)' "
          ">/dev/null 2>&1") == 0;
  return available;
}

inline std::string image_reference_script() {
  return source_file("tests/data/image_reference.py").string();
}

// Runs tests/data/image_reference.py with `args`; false (and a test failure) if it does not succeed.
inline bool run_image_reference_ok(const std::string& args) {
  std::string command = "/usr/bin/python3 " + image_reference_script() + " " + args;
  const bool ok = std::system(command.c_str()) == 0;
  if (!ok) ADD_FAILURE() << "reference script failed: " << command;
  return ok;
}

// Runs tests/data/image_reference.py with `args`; fails the test if it does not succeed.
inline void run_image_reference(const std::string& args) {
  ASSERT_TRUE(run_image_reference_ok(args));
}

// The build tree's directory for test data made once and shared by test processes, or "" when
// it is missing and cannot be made (a test binary copied to another machine).
inline std::string test_cache_dir() {
  const std::string dir = build_file("cache").string();  // build/<preset>/tests/cache
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (!error && ::access(dir.c_str(), W_OK) == 0) return dir;
  return "";
}

// The PIL-made files of image_reference.py's "fixtures" mode (rgb.jpg, progressive.jpg, ... and
// PIL's decode of each, NAME.rgb) for `seed`. CTest runs every test case in its own process, so
// the fixtures are made once per build under test_cache_dir() and shared, keyed by the seed and
// the script's content (editing the script makes them again). Without a cache directory they
// are made in a scratch directory owned by this object.
class ImageFixtures {
 public:
  explicit ImageFixtures(uint64_t seed) {
    const std::string cache = test_cache_dir();
    const std::string seed_arg = std::to_string(seed);
    if (cache.empty()) {
      scratch_ = std::make_unique<ScratchDir>();
      dir_ = scratch_->path();
      run_image_reference_ok("fixtures " + dir_ + " " + seed_arg);
      return;
    }
    std::ifstream script(image_reference_script(), std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(script), std::istreambuf_iterator<char>()};
    dir_ = cache + "/image_fixtures_" + seed_arg + "_" + std::to_string(std::hash<std::string>{}(text));
    if (std::filesystem::exists(dir_)) return;
    // Made in a private directory and renamed into place: a test process running at the same
    // time sees no directory or a complete one. When two make it, the first rename wins.
    std::string pattern = cache + "/making_XXXXXX";
    const std::string making = ::mkdtemp(pattern.data()) ? pattern : "";
    if (making.empty()) {
      ADD_FAILURE() << "cannot make a directory under " << cache;
      return;
    }
    std::error_code error;
    if (run_image_reference_ok("fixtures " + making + " " + seed_arg)) {
      std::filesystem::rename(making, dir_, error);
    }
    std::filesystem::remove_all(making, error);  // left only when the rename lost or failed
  }
  std::string operator/(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& path() const { return dir_; }

 private:
  std::unique_ptr<ScratchDir> scratch_;
  std::string dir_;
};

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

// A torchvision job (as above) on its own raw (height, width, 3) image.
struct TorchvisionJob {
  std::vector<uint8_t> image;
  int64_t height = 0, width = 0;
  std::string spec;
};

// Runs jobs on several images in one Python process (its start-up, importing torch, costs seconds)
// and returns each job's output bytes.
inline std::vector<std::vector<uint8_t>> torchvision_outputs(const std::vector<TorchvisionJob>& jobs) {
  ScratchDir dir;
  std::vector<std::string> specs;
  for (size_t k = 0; k < jobs.size(); ++k) {
    const std::string input = dir / ("input" + std::to_string(k) + ".raw");
    write_bytes(input, jobs[k].image);
    specs.push_back(jobs[k].spec + ", \"input\": \"" + input + "\", \"image_height\": " +
                    std::to_string(jobs[k].height) + ", \"image_width\": " + std::to_string(jobs[k].width));
  }
  // The file-level image is unused: every job names its own.
  return torchvision_outputs({}, 0, 0, specs);
}

// Damaged copies of a baseline JPEG, for Note [JPEG warnings] (data/image/detail/jpeg_decode.h).
// `at` is a fraction of the way through the first scan's entropy-coded data.
inline std::vector<uint8_t> insert_into_scan(std::vector<uint8_t> jpeg, const std::vector<uint8_t>& bytes,
                                             double at = 0.5) {
  size_t sos = 2;
  while (sos + 3 < jpeg.size() && !(jpeg[sos] == 0xFF && jpeg[sos + 1] == 0xDA)) ++sos;
  const size_t begin = sos + 2 + (size_t{jpeg[sos + 2]} << 8 | jpeg[sos + 3]);
  const size_t end = jpeg.size() - 2;  // the EOI marker
  auto where = begin + static_cast<size_t>(static_cast<double>(end - begin) * at);
  while (where > begin && jpeg[where - 1] == 0xFF) --where;  // never split a stuffed 0xFF 0x00
  jpeg.insert(jpeg.begin() + static_cast<std::ptrdiff_t>(where), bytes.begin(), bytes.end());
  return jpeg;
}
// Four stuffed 0xFF bytes are 32 one-bits: longer than any Huffman code (16 bits at most). They
// go near the scan's end: libjpeg-turbo's fast Huffman path (used while more than ~512 bytes
// per block of an MCU remain) decodes a bad code as 0 without a warning; its slow path warns.
inline std::vector<uint8_t> with_bad_huffman_code(const std::vector<uint8_t>& jpeg) {
  return insert_into_scan(jpeg, {0xFF, 0x00, 0xFF, 0x00, 0xFF, 0x00, 0xFF, 0x00}, 0.995);
}
// A restart marker (RST3) in a scan that has no restart interval.
inline std::vector<uint8_t> with_marker_in_scan(const std::vector<uint8_t>& jpeg) {
  return insert_into_scan(jpeg, {0xFF, 0xD3});
}
// Garbage between SOI and the next marker: libjpeg's "extraneous bytes before marker", which
// real ImageNet files raise and PIL accepts.
// They go after the first marker segment (SOI must be followed by a marker at once).
inline std::vector<uint8_t> with_extraneous_bytes(std::vector<uint8_t> jpeg) {
  const std::vector<uint8_t> garbage = {0x12, 0x34, 0x56};
  const size_t after_first_segment = 4 + (size_t{jpeg[4]} << 8 | jpeg[5]);
  jpeg.insert(jpeg.begin() + static_cast<std::ptrdiff_t>(after_first_segment), garbage.begin(),
              garbage.end());
  return jpeg;
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
