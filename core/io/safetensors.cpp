// The safetensors reader and writer. The format rules follow the specification in the
// huggingface/safetensors README: 8-byte little-endian u64 header size N, N bytes of UTF-8 JSON
// (an object; may be padded with trailing spaces), then the byte buffer. Each tensor entry is
// {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the buffer start;
// the buffer is fully indexed (no holes, no overlaps) and "__metadata__" maps strings to strings.
#include "nabla/core/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"

namespace nabla {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // as the reference implementation: 100 MB
constexpr const char* kAllowedDTypes = "F32, F64, F16, BF16, I64, I32, U8, BOOL";

const char* st_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
    case DType::Float16:
      return "F16";
    case DType::BFloat16:
      return "BF16";
    case DType::Int64:
      return "I64";
    case DType::Int32:
      return "I32";
    case DType::UInt8:
      return "U8";
    case DType::Bool:
      return "BOOL";
  }
  return "?";
}

std::optional<DType> st_dtype(std::string_view s) {
  for (int i = 0; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    if (s == st_name(t)) return t;
  }
  return std::nullopt;
}

// JSON from the file, for messages (invalid UTF-8 is replaced rather than thrown on).
std::string show(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string os_error() {
  return std::strerror(errno);
}

// ---- writing ------------------------------------------------------------------------------------

// Copies `t`'s elements, in row-major order, into a host buffer. Works on any strides: the
// storage range the view spans is brought to the host first (CUDA tensors), then gathered.
std::vector<std::byte> host_bytes(const Tensor& t) {
  const size_t item = t.itemsize();
  const int64_t n = t.numel();
  std::vector<std::byte> out(static_cast<size_t>(n) * item);
  if (n == 0) return out;
  int64_t lo = 0, hi = 0;  // element range relative to the storage offset
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t span = (t.size(d) - 1) * t.stride(d);
    (span < 0 ? lo : hi) += span;
  }
  const auto* base = static_cast<const std::byte*>(t.storage()->data()) + (t.storage_offset() + lo) * item;
  const size_t range = static_cast<size_t>(hi - lo + 1) * item;
  std::vector<std::byte> staged;
  if (t.is_cuda()) {
    staged.resize(range);
    cuda::copy_bytes(staged.data(), Device::cpu(), base, t.device(), range);
    base = staged.data();
  }
  base -= lo * static_cast<int64_t>(item);  // now points at the view's first element
  if (t.is_contiguous()) {
    std::memcpy(out.data(), base, out.size());
    return out;
  }
  const int64_t dims = t.dim();
  std::vector<int64_t> index(dims, 0);
  int64_t pos = 0;  // element offset of `index`
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out.data() + i * item, base + pos * static_cast<int64_t>(item), item);
    for (int64_t d = dims - 1; d >= 0; --d) {
      if (++index[d] < t.size(d)) {
        pos += t.stride(d);
        break;
      }
      pos -= (t.size(d) - 1) * t.stride(d);
      index[d] = 0;
    }
  }
  return out;
}

// The header (padded with spaces to a multiple of 8 bytes, as the reference writer does, so the
// buffer stays aligned) and the tensors in key order.
std::string make_header(const std::map<std::string, Tensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    NABLA_CHECK(name != "__metadata__", "save_safetensors: \"__metadata__\" is reserved, not a tensor name");
    NABLA_CHECK(t.defined(), "save_safetensors: tensor \"{}\" is undefined", name);
    uint64_t end = offset + t.nbytes();
    header[name] = {{"dtype", st_name(t.dtype())}, {"shape", t.sizes()}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}

void write_all(int fd, const void* data, size_t n, const std::string& tmp) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    NABLA_CHECK(w > 0, "save_safetensors: cannot write '{}': {}", tmp, os_error());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void emit(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata,
          const std::function<void(const void*, size_t)>& sink) {
  std::string header = make_header(tensors, metadata);
  uint64_t size = header.size();
  sink(&size, sizeof(size));
  sink(header.data(), header.size());
  for (const auto& [name, t] : tensors) {
    auto bytes = host_bytes(t);
    sink(bytes.data(), bytes.size());
  }
}

// ---- reading ------------------------------------------------------------------------------------

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

struct Header {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

// Validates the JSON header against a data buffer of `data_size` bytes.
Header parse_header(std::string_view text, uint64_t data_size, const std::string& file) {
  auto fail = [&](const std::string& what) { NABLA_CHECK(false, "safetensors file '{}': {}", file, what); };
  // JSON lets an object repeat a key and the parser keeps the last one, so two readers of the
  // same file could see different weights: every object's keys are checked as they are parsed.
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::optional<std::string> duplicate;
  auto watch_keys = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) keys_of_open_objects.emplace_back();
    if (event == Event::object_end && !keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
    if (event == Event::key && !duplicate && !keys_of_open_objects.empty() &&
        !keys_of_open_objects.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j = nlohmann::json::parse(text, watch_keys, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("the header is not valid JSON");
  if (duplicate)
    fail(fmt::format("the header has the key \"{}\" twice in one object (keys must be unique)", *duplicate));
  if (!j.is_object()) fail("the header is not a JSON object");
  Header h;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail("\"__metadata__\" is not an object of strings");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail(fmt::format("metadata value \"{}\" is not a string", k));
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    auto where = fmt::format("tensor \"{}\"", key);
    if (!value.is_object()) fail(where + " is not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(field)) fail(fmt::format("{} lacks the field \"{}\"", where, field));
    }
    const auto& dt = value["dtype"];
    if (!dt.is_string()) fail(where + ": \"dtype\" is not a string");
    auto dtype = st_dtype(dt.get<std::string>());
    if (!dtype) {
      fail(fmt::format("{} has unknown dtype \"{}\" (allowed: {})", where, dt.get<std::string>(),
                       kAllowedDTypes));
    }
    const auto& sh = value["shape"];
    if (!sh.is_array()) fail(where + ": \"shape\" is not an array");
    Entry e{key, *dtype, {}, 0, 0};
    for (const auto& d : sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        fail(fmt::format("{} has shape {}: dimensions must be non-negative integers", where, show(sh)));
      }
      e.shape.push_back(d.get<int64_t>());
    }
    const auto& off = value["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      fail(fmt::format("{}: \"data_offsets\" must be [begin, end] with non-negative integers, got {}", where,
                       show(off)));
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end) fail(fmt::format("{}: data_offsets [{}, {}] are reversed", where, e.begin, e.end));
    if (e.end > data_size) {
      fail(fmt::format("{}: data_offsets [{}, {}] are out of range (the data section has {} bytes)", where,
                       e.begin, e.end, data_size));
    }
    // Sizes come from the file: the product is computed without overflow, and nothing is
    // allocated before it matches the (already bounded) span.
    uint64_t bytes = itemsize(*dtype);
    if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) bytes = 0;
    for (int64_t n : e.shape) {
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(n), &bytes)) {
        fail(fmt::format("{} has shape {}, whose size in bytes overflows", where, show(sh)));
      }
    }
    if (e.end - e.begin != bytes) {
      fail(fmt::format("{}: data_offsets span {} bytes but shape {} of {} needs {}", where, e.end - e.begin,
                       show(sh), dt.get<std::string>(), bytes));
    }
    h.entries.push_back(std::move(e));
  }
  // The buffer must be covered exactly: sorted by offset, each tensor starts where the last ended.
  std::vector<const Entry*> order;
  for (const auto& e : h.entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    if (e->begin < covered) {
      fail(fmt::format("tensor \"{}\" (data_offsets [{}, {}]) overlaps tensor \"{}\"", e->name, e->begin,
                       e->end, prev->name));
    }
    if (e->begin > covered)
      fail(fmt::format("bytes [{}, {}) of the data section belong to no tensor", covered, e->begin));
    covered = e->end;
    if (e->end > e->begin) prev = e;
  }
  if (covered != data_size) {
    fail(fmt::format("the data section has {} bytes but the tensors cover {}", data_size, covered));
  }
  return h;
}

uint64_t header_size(std::span<const std::byte> first8, uint64_t file_size, const std::string& file) {
  NABLA_CHECK(file_size >= 8, "safetensors file '{}': too short ({} bytes) to hold the 8-byte header size",
              file, file_size);
  uint64_t n = 0;
  std::memcpy(&n, first8.data(), 8);
  NABLA_CHECK(n <= kMaxHeaderBytes, "safetensors file '{}': header size {} is over the 100 MB limit", file,
              n);
  NABLA_CHECK(n <= file_size - 8,
              "safetensors file '{}': header size {} goes beyond the end of the file ({} bytes)", file, n,
              file_size);
  return n;
}

class File {
 public:
  File(const std::string& path, int flags, mode_t mode = 0)
      : fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)) {}
  ~File() { close(); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  int close() {
    int rc = fd_ >= 0 ? ::close(fd_) : 0;
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

void read_at(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    NABLA_CHECK(r >= 0, "safetensors file '{}': read failed: {}", path, os_error());
    NABLA_CHECK(r > 0, "safetensors file '{}': the file ended early (was it truncated while reading?)", path);
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

}  // namespace

std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::string out;
  emit(tensors, metadata, [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  make_header(tensors, metadata);  // argument errors before any file is touched
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  File file(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  NABLA_CHECK(file.ok(), "save_safetensors: cannot create '{}': {}", tmp, os_error());
  try {
    emit(tensors, metadata, [&](const void* p, size_t n) { write_all(file.fd(), p, n, tmp); });
    NABLA_CHECK(::fsync(file.fd()) == 0, "save_safetensors: cannot flush '{}': {}", tmp, os_error());
    NABLA_CHECK(file.close() == 0, "save_safetensors: cannot close '{}': {}", tmp, os_error());
    NABLA_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "save_safetensors: cannot rename '{}' to '{}': {}",
                tmp, path, os_error());
  } catch (...) {
    file.close();
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable only once the directory entry is on disk.
  auto dir = std::filesystem::path(path).parent_path();
  File d(dir.empty() ? "." : dir.string(), O_RDONLY | O_DIRECTORY);
  NABLA_CHECK(d.ok() && ::fsync(d.fd()) == 0, "save_safetensors: cannot sync the directory of '{}': {}", path,
              os_error());
}

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& name) {
  uint64_t n = header_size(bytes.first(std::min<size_t>(8, bytes.size())), bytes.size(), name);
  std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  auto data = bytes.subspan(8 + n);
  Header h = parse_header(text, data.size(), name);
  SafetensorsFile out{.tensors = {}, .metadata = std::move(h.metadata)};
  for (auto& e : h.entries) {
    Tensor t = Tensor::empty(e.shape, {.dtype = e.dtype});
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data.data() + e.begin, e.end - e.begin);
    out.tensors.emplace(std::move(e.name), std::move(t));
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path, Device device) {
  File file(path, O_RDONLY);
  NABLA_CHECK(file.ok(), "load_safetensors: cannot open '{}': {}", path, os_error());
  struct stat st {};
  NABLA_CHECK(::fstat(file.fd(), &st) == 0, "load_safetensors: cannot stat '{}': {}", path, os_error());
  const auto file_size = static_cast<uint64_t>(st.st_size);
  std::byte first8[8] = {};
  if (file_size >= 8) read_at(file.fd(), first8, 8, 0, path);
  uint64_t n = header_size(first8, file_size, path);
  std::string text(n, '\0');
  read_at(file.fd(), text.data(), n, 8, path);
  Header h = parse_header(text, file_size - 8 - n, path);
  SafetensorsFile out{.tensors = {}, .metadata = std::move(h.metadata)};
  std::vector<std::byte> staging;
  for (auto& e : h.entries) {
    const size_t nbytes = e.end - e.begin;
    Tensor t = Tensor::empty(e.shape, {.dtype = e.dtype, .device = device});
    if (nbytes > 0) {
      if (device.is_cpu()) {
        read_at(file.fd(), t.data_ptr(), nbytes, 8 + n + e.begin, path);
      } else {
        staging.resize(nbytes);
        read_at(file.fd(), staging.data(), nbytes, 8 + n + e.begin, path);
        cuda::copy_bytes(t.data_ptr(), device, staging.data(), Device::cpu(), nbytes);
      }
    }
    out.tensors.emplace(std::move(e.name), std::move(t));
  }
  return out;
}

}  // namespace nabla
