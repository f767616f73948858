// The body shared by the libFuzzer target (tokens_fuzz.cpp) and the corpus test that runs in CI
// (tests/data/token_file_test.cpp): bytes as a nanoGPT or llm.c token file. A nabla::Error
// (DataError) is the only acceptable failure; anything else is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "nabla/core/error.h"
#include "nabla/data/token_file.h"

namespace nabla::fuzz {

// Returns true when the bytes parsed as a token file.
inline bool tokens_fuzz_one(const uint8_t* data, size_t size) {
  try {
    const auto tokens = data::parse_token_file(std::span(data, size), "<fuzz input>");
    // Every byte after the header is a token's: a raw file holds size / 2 tokens, an llm.c file
    // (which parsed, so it has its 1 KiB header) the rest of its bytes in 2- or 4-byte tokens.
    uint32_t magic = 0;
    for (size_t i = 0; i < 4 && i < size; ++i) magic |= uint32_t{data[i]} << (8 * i);
    size_t expected = size / 2;
    if (size >= 4 && magic == static_cast<uint32_t>(data::kLlmcGpt2Magic)) expected = (size - 1024) / 2;
    if (size >= 4 && magic == static_cast<uint32_t>(data::kLlmcLlama3Magic)) expected = (size - 1024) / 4;
    if (tokens.size() != expected) __builtin_trap();
    volatile uint32_t sink = 0;
    for (uint32_t t : tokens) sink = sink ^ t;
    return true;
  } catch (const nabla::Error&) {
    return false;
  }
}

// A nanoGPT file, an llm.c GPT-2 file and an llm.c LLaMA 3 file, each a few dozen tokens: the seeds.
inline std::vector<std::pair<std::string, std::string>> tokens_fuzz_seeds() {
  auto le = [](std::string& out, uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  };
  auto llmc = [&](int32_t magic, int32_t version, int count, int width) {
    std::string out;
    for (int i = 0; i < 256; ++i) le(out, i == 0 ? magic : i == 1 ? version : i == 2 ? count : 0, 4);
    for (int t = 0; t < count; ++t) le(out, static_cast<uint32_t>(t * 2654435761u % 128256u), width);
    return out;
  };
  std::string nanogpt;
  for (int t = 0; t < 64; ++t) le(nanogpt, static_cast<uint32_t>(t * 40503u % 50257u), 2);
  return {{"nanogpt.bin", nanogpt},
          {"llmc_gpt2.bin", llmc(data::kLlmcGpt2Magic, 1, 40, 2)},
          {"llmc_llama3.bin", llmc(data::kLlmcLlama3Magic, 7, 24, 4)}};
}

}  // namespace nabla::fuzz
