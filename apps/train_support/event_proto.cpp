#include "nabla/apps/train_support/event_proto.h"

#include <bit>
#include <cstring>

namespace nabla::train_support {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (field << 3) | wire_type);
}

template <typename T>
void put_fixed(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little, "protobuf fixed fields are little-endian");
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_header(double wall_time) {
  std::string event;
  put_key(event, 1, kFixed64);
  put_fixed<double>(event, wall_time);
  return event;
}

}  // namespace

std::string encode_file_version_event(double wall_time, std::string_view version) {
  std::string event = event_header(wall_time);
  put_bytes(event, 3, version);
  return event;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, kFixed32);
    put_fixed<float>(v, static_cast<float>(value));
    put_bytes(summary, 1, v);
  }
  std::string event = event_header(wall_time);
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<uint64_t>(step));  // int64: negative steps take 10 bytes, as protobuf does
  put_bytes(event, 5, summary);
  return event;
}

}  // namespace nabla::train_support
