#include "nabla/data/token_file.h"

#include "nabla/data/detail/byte_source.h"
#include "nabla/data/error.h"

namespace nabla::data {
namespace {

constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

int32_t int32_at(std::span<const uint8_t> bytes, size_t i) {
  uint32_t u = 0;
  for (size_t k = 0; k < 4; ++k) u |= uint32_t{bytes[4 * i + k]} << (8 * k);
  return static_cast<int32_t>(u);
}

template <typename Stored>
std::vector<uint32_t> widen(std::span<const uint8_t> payload) {
  std::vector<uint32_t> tokens(payload.size() / sizeof(Stored));
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t u = 0;
    for (size_t k = 0; k < sizeof(Stored); ++k) u |= uint32_t{payload[i * sizeof(Stored) + k]} << (8 * k);
    tokens[i] = u;
  }
  return tokens;
}

}  // namespace

std::vector<uint32_t> parse_token_file(std::span<const uint8_t> bytes, const std::string& name) {
  auto fail = [&](const std::string& problem) { return DataError(-1, name, problem); };
  const int32_t magic = bytes.size() >= 4 ? int32_at(bytes, 0) : 0;
  if (magic != kLlmcGpt2Magic && magic != kLlmcLlama3Magic) {
    if (bytes.size() % 2 != 0) {
      throw fail(
          fmt::format("{} bytes is not a whole number of uint16 tokens (a nanoGPT file has no header; "
                      "an llm.c file starts with magic {} or {})",
                      bytes.size(), kLlmcGpt2Magic, kLlmcLlama3Magic));
    }
    return widen<uint16_t>(bytes);
  }
  if (bytes.size() < kHeaderBytes) {
    throw fail(fmt::format("llm.c magic {} but only {} bytes; the header alone is {} bytes", magic,
                           bytes.size(), kHeaderBytes));
  }
  const int32_t version = int32_at(bytes, 1);
  const int32_t count = int32_at(bytes, 2);
  const bool gpt2 = magic == kLlmcGpt2Magic;
  const int32_t expected_version = gpt2 ? 1 : 7;
  if (version != expected_version) {
    throw fail(fmt::format("llm.c magic {} with version {}; that magic goes with version {}", magic, version,
                           expected_version));
  }
  if (count < 0) throw fail(fmt::format("llm.c header: negative token count {}", count));
  const size_t width = gpt2 ? 2 : 4;
  const size_t payload = bytes.size() - kHeaderBytes;
  if (payload != width * static_cast<size_t>(count)) {
    throw fail(fmt::format("llm.c header says {} tokens of {} bytes, but {} bytes follow the header", count,
                           width, payload));
  }
  const auto tokens = bytes.subspan(kHeaderBytes);
  return gpt2 ? widen<uint16_t>(tokens) : widen<uint32_t>(tokens);
}

std::vector<uint32_t> read_token_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_token_file(bytes, path);
}

}  // namespace nabla::data
