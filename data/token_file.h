// Public header. Token files: the pre-tokenized corpora nanoGPT and llm.c write.
//
//   nanoGPT:  raw little-endian uint16 tokens (prepare.py's train.bin / val.bin), no header;
//   llm.c:    a header of 256 little-endian int32 values, then the tokens:
//             magic 20240520, version 1: uint16 tokens (GPT-2's vocabulary);
//             magic 20240801, version 7: uint32 tokens (LLaMA 3's vocabulary);
//             header[2] is the token count.
// The formats are told apart by the first int32; a raw file that happens to start with a magic is
// read as llm.c's. Tokens come out as uint32 either way.
//
//   auto tokens = nabla::data::read_token_file("fineweb_train_000001.bin");
//
// A header with an unknown version, a count that disagrees with the file's size, or a payload that
// is not a whole number of tokens is a DataError naming the file and what was wrong.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nabla::data {

inline constexpr int32_t kLlmcGpt2Magic = 20240520;
inline constexpr int32_t kLlmcLlama3Magic = 20240801;

// Parses a token file's bytes; `name` names the source in errors.
std::vector<uint32_t> parse_token_file(std::span<const uint8_t> bytes, const std::string& name);
std::vector<uint32_t> read_token_file(const std::string& path);

}  // namespace nabla::data
