#include "nabla/apps/train_support/tfrecord.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

#include "nabla/apps/train_support/crc32c.h"
#include "nabla/core/error.h"

namespace nabla::train_support {
namespace {

static_assert(std::endian::native == std::endian::little, "TFRecord framing assumes a little-endian host");

template <typename T>
void append_le(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <typename T>
T read_le(const std::string& in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof(T));
  return value;
}

}  // namespace

std::string frame_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  append_le<uint64_t>(out, data.size());
  append_le<uint32_t>(out, mask_crc(crc32c(out.data(), 8)));
  out.append(data);
  append_le<uint32_t>(out, mask_crc(crc32c(data)));
  return out;
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  NABLA_CHECK(file.good(), "read_tfrecords: cannot open '{}'", path);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t index = records.size();
    NABLA_CHECK(bytes.size() - at >= 12,
                "read_tfrecords: '{}' record {} at byte {}: truncated header ({} bytes left, 12 needed)",
                path, index, at, bytes.size() - at);
    const auto length = read_le<uint64_t>(bytes, at);
    NABLA_CHECK(unmask_crc(read_le<uint32_t>(bytes, at + 8)) == crc32c(bytes.data() + at, 8),
                "read_tfrecords: '{}' record {} at byte {}: the length's CRC does not match", path, index,
                at);
    const size_t left = bytes.size() - at - 12;
    NABLA_CHECK(left >= 4 && length <= left - 4,
                "read_tfrecords: '{}' record {} at byte {}: truncated ({} data bytes + 4 CRC bytes "
                "announced, {} left)",
                path, index, at, length, left);
    std::string data = bytes.substr(at + 12, length);
    NABLA_CHECK(unmask_crc(read_le<uint32_t>(bytes, at + 12 + length)) == crc32c(data),
                "read_tfrecords: '{}' record {} at byte {}: the data's CRC does not match", path, index, at);
    records.push_back(std::move(data));
    at += 12 + length + 4;
  }
  return records;
}

}  // namespace nabla::train_support
