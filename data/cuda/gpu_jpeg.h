// Internal (data/ only). The GPU half of a deferred batch (DataLoaderOptions::defer_decode):
// nvJPEG decodes the JPEGs the workers left undecoded, and one kernel crops, resizes, flips and
// normalizes every image of the batch into the training tensor (resample_cuda.h). Reached only
// from the CUDA branch of a dispatch (device_prefetcher.cpp), so a build without CUDA needs no
// definition. Note [GPU decode] in docs/design/data.md.
//
//   workers: read file, parse header, draw crop + flip  ──► Batch{deferred, pixels of CPU rows}
//   decode(): nvJPEG batched decode (hardware engine, else GPU hybrid) of the on_gpu rows,
//             nvjpegDecode one by one where the batch call fails, the CPU decoder where that
//             fails too; upload of the CPU rows; one resample + normalize kernel
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "nabla/core/cuda/stream.h"
#include "nabla/data/data_loader.h"
#include "nabla/data/normalize.h"

namespace nabla::data::cuda {

struct GpuDecodeCounts {
  int64_t batches = 0;
  int64_t gpu_images = 0;         // decoded by nvJPEG
  int64_t worker_cpu_images = 0;  // decoded by the workers (not JPEGs the GPU decoder takes)
  int64_t fallback_images = 0;    // left for the GPU, but nvJPEG refused them: decoded on the CPU here
};

// Why nvJPEG cannot decode on this machine ("" when it can).
std::string gpu_decode_unavailable_reason();

class GpuJpegDecoder {
 public:
  // On `device`. Without nvJPEG every image is decoded on the CPU, in decode(), after one
  // logged line: slow, but the batch is the same.
  explicit GpuJpegDecoder(int device);
  ~GpuJpegDecoder();
  GpuJpegDecoder(const GpuJpegDecoder&) = delete;
  GpuJpegDecoder& operator=(const GpuJpegDecoder&) = delete;

  // The (N, 3, S, S) batch of `host` (a deferred batch of (N, S, S, 3) rows), normalized and
  // laid out as `normalize` says, computed on `stream` (the current stream must be `stream`).
  // `name_of` names a dataset index in errors. May write the CPU fallbacks' rows of host.input.
  Tensor decode(Batch& host, const NormalizeOptions& normalize, nabla::cuda::Stream stream,
                const std::function<std::string(int64_t)>& name_of);

  // "hardware", "GPU hybrid", or "CPU (why)".
  std::string backend() const;
  GpuDecodeCounts counts() const { return counts_; }

  struct Nvjpeg;  // the handles (gpu_jpeg.cpp)

 private:
  int device_;
  std::unique_ptr<Nvjpeg> nvjpeg_;
  GpuDecodeCounts counts_;
};

}  // namespace nabla::data::cuda
