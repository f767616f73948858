// GpuJpegDecoder (gpu_jpeg.h): nvJPEG through the declared API of nvjpeg.h, the resample kernel
// of resample_cuda.h, and the CPU decoder for whatever nvJPEG refuses.
#include "nabla/data/cuda/gpu_jpeg.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/error.h"
#include "nabla/core/logging.h"
#include "nabla/data/cuda/nvjpeg.h"
#include "nabla/data/cuda/resample_cuda.h"
#include "nabla/data/error.h"
#include "nabla/data/image/decode.h"
#include "nabla/data/image/detail/bilinear.h"

namespace nabla::data::cuda {

namespace {

constexpr size_t kAlign = 256;  // each decoded image starts on its own 256-byte boundary

size_t align_up(size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// One handle and the decode state of its batched calls (and one for single images).
struct Engine {
  const nvjpeg::Api* api = nullptr;
  nvjpeg::Handle handle = nullptr;
  nvjpeg::State batched = nullptr;
  nvjpeg::State single = nullptr;
  int batch_size = 0;  // what `batched` was initialized for

  bool open(const nvjpeg::Api* a, nvjpeg::Backend backend) {
    api = a;
    if (api->create_ex(backend, nullptr, nullptr, 0, &handle) != nvjpeg::kSuccess) {
      handle = nullptr;
      return false;
    }
    if (api->state_create(handle, &batched) != nvjpeg::kSuccess ||
        api->state_create(handle, &single) != nvjpeg::kSuccess) {
      close();
      return false;
    }
    return true;
  }
  void close() {
    if (single != nullptr) api->state_destroy(single);
    if (batched != nullptr) api->state_destroy(batched);
    if (handle != nullptr) api->destroy(handle);
    handle = nullptr;
    batched = single = nullptr;
  }
  // Decodes data[k] into images[k] in one call; false when nvJPEG refused the batch.
  bool decode_batch(const std::vector<const unsigned char*>& data, const std::vector<size_t>& lengths,
                    std::vector<nvjpeg::Image>& images, void* stream) {
    const auto count = static_cast<int>(data.size());
    if (count == 0) return true;
    if (count != batch_size) {
      if (api->batched_initialize(handle, batched, count, 1, nvjpeg::kOutputRgbi) != nvjpeg::kSuccess) {
        batch_size = 0;
        return false;
      }
      batch_size = count;
    }
    return api->decode_batched(handle, batched, data.data(), lengths.data(), images.data(), stream) ==
           nvjpeg::kSuccess;
  }
  int decode_one(const std::vector<uint8_t>& bytes, nvjpeg::Image& image, void* stream) {
    return api->decode(handle, single, bytes.data(), bytes.size(), nvjpeg::kOutputRgbi, &image, stream);
  }
};

}  // namespace

struct GpuJpegDecoder::Nvjpeg {
  const nvjpeg::Api* api = nullptr;
  Engine hardware;  // the GPU's JPEG engines, where it has them
  Engine hybrid;    // the CUDA cores (and the host for the Huffman stage of small batches)
  nvjpeg::JpegStream stream = nullptr;  // parses one file to ask the hardware engine about it
  ~Nvjpeg() {
    if (stream != nullptr) api->stream_destroy(stream);
    hardware.close();
    hybrid.close();
  }
};

std::string gpu_decode_unavailable_reason() {
  return nvjpeg::api() == nullptr ? nvjpeg::unavailable_reason() : std::string();
}

GpuJpegDecoder::GpuJpegDecoder(int device) : device_(device) {
  const nvjpeg::Api* api = nvjpeg::api();
  if (api == nullptr) {
    NABLA_LOG_WARN("GPU decode: {}; decoding every JPEG on the CPU instead", nvjpeg::unavailable_reason());
    return;
  }
  nabla::cuda::DeviceGuard guard(device);
  auto n = std::make_unique<Nvjpeg>();
  n->api = api;
  const bool hardware = n->hardware.open(api, nvjpeg::kBackendHardware);
  if (hardware && api->stream_create(n->hardware.handle, &n->stream) != nvjpeg::kSuccess) n->hardware.close();
  if (!n->hybrid.open(api, nvjpeg::kBackendGpuHybrid) && !n->hybrid.open(api, nvjpeg::kBackendDefault)) {
    NABLA_LOG_WARN(
        "GPU decode: nvJPEG {} could not create a decoder on device {}; decoding on the CPU instead",
        nvjpeg::version(), device);
    return;
  }
  nvjpeg_ = std::move(n);
  NABLA_LOG_INFO("GPU decode: nvJPEG {} on device {}, {}", nvjpeg::version(), device, backend());
}

GpuJpegDecoder::~GpuJpegDecoder() = default;

std::string GpuJpegDecoder::backend() const {
  if (!nvjpeg_)
    return fmt::format("CPU ({})", gpu_decode_unavailable_reason().empty()
                                       ? "nvJPEG could not create a decoder"
                                       : "nvJPEG is not available");
  return nvjpeg_->hardware.handle != nullptr ? "hardware" : "GPU hybrid";
}

namespace {

// Decodes one deferred image on the CPU at full size into its (size, size, 3) row, as the CPU
// path would with dct_scaling off. Throws DataError naming the file.
void decode_on_cpu(const DeferredImage& image, std::span<uint8_t> row, int64_t size, int64_t index,
                   const std::function<std::string(int64_t)>& name_of) {
  try {
    const ImageHeader header = read_image_header(image.bytes);
    DecodedImage decoded;  // not kept: this path is rare, and one huge image would stay resident
    decode_image(image.bytes, header, ScaleFactor{}, decoded);
    if (!decoded.corrupt_data.empty()) {
      NABLA_LOG_WARN("sample {} ({}): {}; decoded with the damaged part filled in", index, name_of(index),
                     decoded.corrupt_data);
    }
    resample_bilinear(decoded.pixels, decoded.height, decoded.width, 3, image.map, row, size, size,
                      image.flip);
  } catch (const nabla::Error& e) {
    throw DataError(index, name_of(index), e.what());
  }
}

}  // namespace

Tensor GpuJpegDecoder::decode(Batch& host, const NormalizeOptions& normalize, nabla::cuda::Stream stream,
                              const std::function<std::string(int64_t)>& name_of) {
  const Tensor& pixels = host.input;
  NABLA_CHECK(host.deferred != nullptr && pixels.dim() == 4 && pixels.dtype() == kUInt8 &&
                  pixels.size(1) == pixels.size(2) && pixels.size(3) == 3 &&
                  static_cast<int64_t>(host.deferred->size()) == pixels.size(0),
              "GPU decode: expected a deferred batch of (N, S, S, 3) uint8 images, got {} with {} entries",
              nabla::describe(pixels), host.deferred ? host.deferred->size() : 0);
  const int64_t n = pixels.size(0), size = pixels.size(1);
  const size_t row_bytes = static_cast<size_t>(size * size * 3);
  const std::vector<DeferredImage>& images = *host.deferred;
  auto row_of = [&](int64_t i) {
    return std::span<uint8_t>(static_cast<uint8_t*>(pixels.data_ptr()) + static_cast<size_t>(i) * row_bytes,
                              row_bytes);
  };
  auto index_of = [&](int64_t i) { return host.indices[static_cast<size_t>(i)]; };
  const Device device = Device::cuda(device_);
  // nvJPEG decodes on the current device: the prefetcher's, whatever the calling thread's is.
  const nabla::cuda::DeviceGuard on_device(device_);
  void* cuda_stream = stream.handle();

  // Which rows nvJPEG decodes; the others are (or become) CPU rows of host.input.
  std::vector<int64_t> gpu_rows;
  std::vector<bool> on_cpu(static_cast<size_t>(n), true);
  for (int64_t i = 0; i < n; ++i) {
    const DeferredImage& image = images[static_cast<size_t>(i)];
    if (!image.on_gpu) {
      ++counts_.worker_cpu_images;
    } else if (nvjpeg_) {
      gpu_rows.push_back(i);
      on_cpu[static_cast<size_t>(i)] = false;
    } else {
      decode_on_cpu(image, row_of(i), size, index_of(i), name_of);
      ++counts_.fallback_images;
    }
  }

  // One device buffer for every decoded image, from the caching allocator on this stream.
  std::vector<size_t> offsets;
  size_t total = 0;
  for (int64_t i : gpu_rows) {
    const DeferredImage& image = images[static_cast<size_t>(i)];
    offsets.push_back(total);
    total += align_up(static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3);
  }
  Tensor decoded = total > 0
                       ? Tensor::empty({static_cast<int64_t>(total)}, {.dtype = kUInt8, .device = device})
                       : Tensor();
  std::vector<nvjpeg::Image> destinations(gpu_rows.size());
  for (size_t k = 0; k < gpu_rows.size(); ++k) {
    const DeferredImage& image = images[static_cast<size_t>(gpu_rows[k])];
    std::memset(&destinations[k], 0, sizeof(nvjpeg::Image));
    destinations[k].channel[0] = static_cast<unsigned char*>(decoded.data_ptr()) + offsets[k];
    destinations[k].pitch[0] = static_cast<size_t>(image.width) * 3;
  }

  if (!gpu_rows.empty()) {
    Nvjpeg& nv = *nvjpeg_;
    // The hardware engine takes the files it says it supports, the hybrid decoder the rest.
    std::vector<size_t> hardware_items, hybrid_items;
    for (size_t k = 0; k < gpu_rows.size(); ++k) {
      const DeferredImage& image = images[static_cast<size_t>(gpu_rows[k])];
      int unsupported = 1;
      if (nv.hardware.handle != nullptr &&
          nv.api->stream_parse(nv.hardware.handle, image.bytes.data(), image.bytes.size(), 0, 0, nv.stream) ==
              nvjpeg::kSuccess &&
          nv.api->batched_supported(nv.hardware.handle, nv.stream, &unsupported) == nvjpeg::kSuccess &&
          unsupported == 0) {
        hardware_items.push_back(k);
      } else {
        hybrid_items.push_back(k);
      }
    }
    std::vector<size_t> one_by_one;
    auto run = [&](Engine& engine, const std::vector<size_t>& items) {
      std::vector<const unsigned char*> data;
      std::vector<size_t> lengths;
      std::vector<nvjpeg::Image> out;
      for (size_t k : items) {
        const DeferredImage& image = images[static_cast<size_t>(gpu_rows[k])];
        data.push_back(image.bytes.data());
        lengths.push_back(image.bytes.size());
        out.push_back(destinations[k]);
      }
      if (!engine.decode_batch(data, lengths, out, cuda_stream))
        one_by_one.insert(one_by_one.end(), items.begin(), items.end());
    };
    run(nv.hardware, hardware_items);
    run(nv.hybrid, hybrid_items);
    // A batch nvJPEG refused: each image alone, and the CPU decoder for those it refuses again.
    for (size_t k : one_by_one) {
      const int64_t row = gpu_rows[k];
      const DeferredImage& image = images[static_cast<size_t>(row)];
      const int status = nv.hybrid.decode_one(image.bytes, destinations[k], cuda_stream);
      if (status != nvjpeg::kSuccess) {
        NABLA_LOG_WARN("GPU decode: nvJPEG refused sample {} ({}): {}; decoding it on the CPU", index_of(row),
                       name_of(index_of(row)), nvjpeg::status_name(status));
        decode_on_cpu(image, row_of(row), size, index_of(row), name_of);
        on_cpu[static_cast<size_t>(row)] = true;
        ++counts_.fallback_images;
      }
    }
    for (int64_t row : gpu_rows) counts_.gpu_images += on_cpu[static_cast<size_t>(row)] ? 0 : 1;
  }

  // The CPU rows, gathered into one pinned block and uploaded in one copy.
  std::vector<int64_t> cpu_rows;
  for (int64_t i = 0; i < n; ++i) {
    if (on_cpu[static_cast<size_t>(i)]) cpu_rows.push_back(i);
  }
  Tensor cpu_device;
  if (!cpu_rows.empty()) {
    Tensor staged = Tensor::empty({static_cast<int64_t>(cpu_rows.size() * row_bytes)},
                                  {.dtype = kUInt8, .pinned_memory = pixels.is_pinned()});
    for (size_t j = 0; j < cpu_rows.size(); ++j) {
      std::memcpy(static_cast<uint8_t*>(staged.data_ptr()) + j * row_bytes, row_of(cpu_rows[j]).data(),
                  row_bytes);
    }
    cpu_device = staged.to(device);
  }

  // The kernel's table: a source per image, then the taps (y then x for each GPU image; one
  // identity block shared by the CPU rows, which are already size x size).
  std::vector<ResampleSource> sources(static_cast<size_t>(n));
  std::vector<detail::Tap> taps;
  const auto identity_at = static_cast<int32_t>(taps.size());
  for (int64_t o = 0; o < 2 * size; ++o) {
    const auto p = static_cast<int32_t>(o % size);
    taps.push_back({.i0 = p, .i1 = p, .w1 = 0.0f});
  }
  for (size_t j = 0; j < cpu_rows.size(); ++j) {
    ResampleSource& s = sources[static_cast<size_t>(cpu_rows[j])];
    s.pixels = static_cast<const uint8_t*>(cpu_device.data_ptr()) + j * row_bytes;
    s.pitch = size * 3;
    s.taps = identity_at;
    s.flip = 0;  // the CPU decode applied it
  }
  for (size_t k = 0; k < gpu_rows.size(); ++k) {
    const int64_t row = gpu_rows[k];
    if (on_cpu[static_cast<size_t>(row)]) continue;  // nvJPEG refused it: a CPU row above
    const DeferredImage& image = images[static_cast<size_t>(row)];
    ResampleSource& s = sources[static_cast<size_t>(row)];
    s.pixels = static_cast<const uint8_t*>(decoded.data_ptr()) + offsets[k];
    s.pitch = static_cast<int64_t>(image.width) * 3;
    s.taps = static_cast<int32_t>(taps.size());
    s.flip = image.flip ? 1 : 0;
    const std::vector<detail::Tap> ys = detail::bilinear_taps(image.map.y, size, image.height);
    const std::vector<detail::Tap> xs = detail::bilinear_taps(image.map.x, size, image.width);
    taps.insert(taps.end(), ys.begin(), ys.end());
    taps.insert(taps.end(), xs.begin(), xs.end());
  }
  const size_t sources_bytes = align_up(sources.size() * sizeof(ResampleSource));
  const size_t table_bytes = sources_bytes + taps.size() * sizeof(detail::Tap);
  Tensor table = Tensor::empty({static_cast<int64_t>(table_bytes)}, {.dtype = kUInt8, .pinned_memory = true});
  std::memcpy(table.data_ptr(), sources.data(), sources.size() * sizeof(ResampleSource));
  std::memcpy(static_cast<uint8_t*>(table.data_ptr()) + sources_bytes, taps.data(),
              taps.size() * sizeof(detail::Tap));
  const Tensor table_device = table.to(device);

  const NormalizeCoefficients k = normalize_coefficients(normalize, 3);
  Tensor out =
      Tensor::empty({n, 3, size, size},
                    {.dtype = normalize.dtype, .device = device, .memory_format = normalize.memory_format});
  const auto* base = static_cast<const uint8_t*>(table_device.data_ptr());
  launch_resample_normalize(reinterpret_cast<const ResampleSource*>(base),
                            reinterpret_cast<const detail::Tap*>(base + sources_bytes), n, size,
                            out.data_ptr(), normalize.dtype,
                            normalize.memory_format == MemoryFormat::ChannelsLast, k, stream);
  ++counts_.batches;
  // decoded, cpu_device and table_device are freed here: their blocks are reused only by later
  // work on this stream, which runs after the kernel.
  return out;
}

}  // namespace nabla::data::cuda
