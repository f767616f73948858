// The body shared by the libFuzzer target (cifar_fuzz.cpp) and the corpus test that runs in CI
// (tests/data/datasets_test.cpp): the first byte picks the variant (bit 0: CIFAR-100, bit 1: coarse
// labels), the rest is a CIFAR binary file; every record read back is loaded and described. A
// nabla::Error (DataError) is the only acceptable failure; anything else is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "nabla/core/error.h"
#include "nabla/data/cifar.h"

namespace nabla::fuzz {

// Returns the number of records read, or -1 when the file was refused.
inline int64_t cifar_fuzz_one(const uint8_t* data, size_t size) {
  if (size == 0) return -1;
  const data::CifarOptions options{
      .variant = (data[0] & 1) ? data::CifarVariant::cifar100 : data::CifarVariant::cifar10,
      .fine_labels = (data[0] & 2) == 0};
  try {
    auto dataset = data::CifarDataset::parse(std::span(data + 1, size - 1), "<fuzz input>", options);
    std::vector<uint8_t> pixels(data::CifarDataset::kImageBytes);
    for (int64_t i = 0; i < dataset->size(); ++i) {
      const int64_t label = dataset->load_into(i, pixels, {});
      if (label < 0 || label >= dataset->num_classes()) __builtin_trap();
      (void)dataset->describe(i);
    }
    return dataset->size();
  } catch (const nabla::Error&) {
    return -1;
  }
}

// Two CIFAR-10 records and two CIFAR-100 records (fine labels), after their variant byte: the seeds.
inline std::vector<std::pair<std::string, std::string>> cifar_fuzz_seeds() {
  auto file = [](char variant, int label_bytes, int records) {
    std::string out(1, variant);
    for (int r = 0; r < records; ++r) {
      for (int l = 0; l < label_bytes; ++l) out.push_back(static_cast<char>(3 + r + l));
      for (int i = 0; i < data::CifarDataset::kImageBytes; ++i)
        out.push_back(static_cast<char>((i * 7 + r) & 0xff));
    }
    return out;
  };
  return {{"cifar10.bin", file(0, 1, 2)}, {"cifar100.bin", file(1, 2, 2)}};
}

}  // namespace nabla::fuzz
