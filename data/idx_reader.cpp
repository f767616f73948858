// parse_idx and read_idx (see idx.h). The header is validated field by field before any payload
// memory is reserved, and the payload buffer grows with the bytes actually read, so a short file
// that claims billions of elements fails fast without a large allocation.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "nabla/data/detail/byte_source.h"
#include "nabla/data/error.h"
#include "nabla/data/idx.h"

namespace nabla::data {

namespace {

constexpr uint8_t kUnsignedByte = 0x08;
constexpr size_t kChunk = size_t{1} << 20;

const char* element_type_name(uint8_t code) {
  switch (code) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return nullptr;
  }
}

[[noreturn]] void fail(const std::string& name, const std::string& problem) {
  throw DataError(-1, name, problem);
}

}  // namespace

IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& name, size_t max_bytes) {
  if (bytes.empty()) fail(name, "the IDX file is empty");
  ByteSource source(bytes, name);
  const char* kind = source.compressed() ? "decompressed IDX data" : "IDX file";
  uint8_t magic[4];
  size_t got = source.read(magic, 4);
  if (got < 4) fail(name, fmt::format("the {} is {} bytes, too short for the 4-byte IDX magic", kind, got));
  if (magic[0] != 0 || magic[1] != 0) {
    fail(name, fmt::format("bad IDX magic {:02x} {:02x} {:02x} {:02x}: the first two bytes must be 00 00 "
                           "(is this an IDX file?)",
                           magic[0], magic[1], magic[2], magic[3]));
  }
  if (magic[2] != kUnsignedByte) {
    const char* type = element_type_name(magic[2]);
    fail(name,
         type ? fmt::format("IDX element type 0x{:02x} ({}) is not supported; only 0x08 (unsigned byte) is",
                            magic[2], type)
              : fmt::format("bad IDX magic: element type 0x{:02x} is not an IDX type (0x08 unsigned byte "
                            "expected)",
                            magic[2]));
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4)
    fail(name, fmt::format("IDX files here have 1 to 4 dimensions, this one claims {}", ndims));

  IdxArray out;
  size_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    uint8_t be[4];
    if (source.read(be, 4) < 4)
      fail(name, fmt::format("the {} ends inside its header (dimension {} of {})", kind, d, ndims));
    uint32_t dim = (uint32_t{be[0]} << 24) | (uint32_t{be[1]} << 16) | (uint32_t{be[2]} << 8) | be[3];
    out.dims.push_back(dim);
    if (dim != 0 && total > max_bytes / dim) {
      fail(name, fmt::format("the IDX header claims dimensions whose product exceeds {} bytes, the most this "
                             "reader accepts",
                             max_bytes));
    }
    total *= dim;
  }
  // Grow with the data that is really there.
  while (out.data.size() < total) {
    size_t old = out.data.size();
    size_t want = std::min(kChunk, total - old);
    out.data.resize(old + want);
    size_t read = source.read(out.data.data() + old, want);
    if (read < want) {
      fail(name,
           fmt::format("the {} is truncated: its header (dimensions {}) promises {} data bytes, but only {} "
                       "follow",
                       kind, fmt::join(out.dims, " x "), total, old + read));
    }
  }
  uint8_t extra;
  if (source.read(&extra, 1) != 0) {
    fail(name,
         fmt::format("the {} has bytes after the {} its header (dimensions {}) promises; the counts in the "
                     "header are wrong or the file is not IDX",
                     kind, total, fmt::join(out.dims, " x ")));
  }
  return out;
}

IdxArray read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_idx(bytes, path);
}

}  // namespace nabla::data
