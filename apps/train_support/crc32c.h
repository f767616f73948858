// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing, and
// TensorFlow's "masked" form of it. A table-driven software CRC: the event files are tiny, so the
// SSE4.2 instruction would buy nothing here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace nabla::train_support {

// CRC-32C of the bytes; crc32c("123456789") == 0xE3069283 (RFC 3720's check value).
uint32_t crc32c(const void* data, size_t size);
inline uint32_t crc32c(std::string_view bytes) {
  return crc32c(bytes.data(), bytes.size());
}

// TFRecord stores masked CRCs: a CRC of data that itself contains CRCs is weak, so TensorFlow
// rotates and offsets it (tensorflow/core/lib/hash/crc32c.h, Mask/Unmask).
constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;
inline uint32_t mask_crc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta;
}
inline uint32_t unmask_crc(uint32_t masked) {
  uint32_t rot = masked - kCrcMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace nabla::train_support
