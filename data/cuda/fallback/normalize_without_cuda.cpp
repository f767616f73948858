// The fused normalize kernel's launcher in a build without CUDA: no tensor can be on a device
// there, so reaching this is a usage error and says so.
#include "nabla/core/error.h"
#include "nabla/data/cuda/normalize_cuda.h"

namespace nabla::data::cuda {

void launch_normalize(const uint8_t*, void*, int64_t, int64_t, int64_t, int64_t, DType, bool,
                      const NormalizeCoefficients&, nabla::cuda::Stream) {
  NABLA_CHECK(false,
              "normalize_images on a CUDA tensor: nabla was built without CUDA "
              "(configure with NABLA_CUDA=ON on a machine with the CUDA toolkit)");
}

}  // namespace nabla::data::cuda
