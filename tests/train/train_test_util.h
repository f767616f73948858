// Helpers for the nabla-train tests: run the real binary with arguments, and build a small
// Fashion-MNIST directory (IDX files holding the first images of the real data set), so a run
// crosses epochs in a few steps.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "../apps/apps_test_util.h"
#include "nabla/core/io/safetensors.h"
#include "nabla/data/idx.h"
#include "test_paths.h"

namespace nabla::testing {

inline const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

inline bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz") ||
         std::filesystem::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte");
}

// The nabla-train binary of this build (NABLA_TRAIN_PATH is relative to the test binary's folder).
inline std::string train_binary() {
  return nabla::testing::build_file(NABLA_TRAIN_PATH).string();
}

// nabla-train with `args`, stdout and stderr merged.
inline CommandResult run_train(const std::string& args) {
  return run_command(train_binary() + " " + args + " 2>&1");
}

inline int exit_code(const CommandResult& r) {
  return WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1;
}

// Writes an IDX file (big-endian header, type 0x08 = uint8).
inline void write_idx(const std::string& path, const std::vector<int64_t>& dims, const uint8_t* bytes) {
  std::string out = {0, 0, 8, static_cast<char>(dims.size())};
  size_t count = 1;
  for (int64_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((d >> shift) & 0xff));
    count *= static_cast<size_t>(d);
  }
  out.append(reinterpret_cast<const char*>(bytes), count);
  write_file(path, out);
}

// The first `train` / `test` examples of the real Fashion-MNIST, as a data directory.
inline void write_small_fashion_mnist(const std::filesystem::path& dir, int64_t train, int64_t test) {
  std::filesystem::create_directories(dir);
  for (const auto& [prefix, n] : {std::pair<std::string, int64_t>{"train", train}, {"t10k", test}}) {
    auto images = data::read_idx(std::string(kFashionMnist) + "/" + prefix + "-images-idx3-ubyte.gz");
    auto labels = data::read_idx(std::string(kFashionMnist) + "/" + prefix + "-labels-idx1-ubyte.gz");
    write_idx((dir / (prefix + "-images-idx3-ubyte")).string(), {n, 28, 28}, images.data.data());
    write_idx((dir / (prefix + "-labels-idx1-ubyte")).string(), {n}, labels.data.data());
  }
}

// Every tensor of `a` and `b` under `prefix` is bit-identical, and there is at least one.
inline void expect_same_tensors(const SafetensorsFile& a, const SafetensorsFile& b,
                                const std::string& prefix) {
  int compared = 0;
  for (const auto& [key, ta] : a.tensors) {
    if (key.rfind(prefix, 0) != 0) continue;
    ASSERT_TRUE(b.tensors.count(key)) << key;
    const Tensor& tb = b.tensors.at(key);
    ASSERT_EQ(ta.sizes(), tb.sizes()) << key;
    ASSERT_EQ(ta.nbytes(), tb.nbytes()) << key;
    EXPECT_EQ(std::memcmp(ta.contiguous().data_ptr(), tb.contiguous().data_ptr(), ta.nbytes()), 0) << key;
    ++compared;
  }
  EXPECT_GT(compared, 0) << prefix;
}

}  // namespace nabla::testing
