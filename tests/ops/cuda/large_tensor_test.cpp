// CUDA elementwise kernels on tensors past 2^31 elements or 2^31 bytes of offset, where the
// launcher must switch to 64-bit indexing (about 10 GB of device memory in all, one tensor
// at a time). Values are checked at the head and the tail, where 32-bit indexing would wrap.
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

const TensorOptions kBytes{.dtype = kUInt8, .device = Device::cuda()};

std::vector<int64_t> values_at(const Tensor& t, int64_t start, int64_t length) {
  return t.narrow(0, start, length).cpu().to(kInt64).to_vector<int64_t>();
}

void expect_all(const Tensor& t, int64_t value, const char* what) {
  const int64_t n = t.size(0);
  for (int64_t start : {int64_t{0}, n - 40}) {
    for (int64_t v : values_at(t, start, 40)) ASSERT_EQ(v, value) << what << " near element " << start;
  }
}

TEST(CudaLargeTensors, KernelsIndexPastTwoToThe31Elements) {
  SKIP_WITHOUT_GPU();
  const int64_t n = (int64_t{1} << 31) + 37;
  {
    Tensor a = full({n}, 3.0, kBytes);  // vectorized fill
    expect_all(a, 3, "fill");
    expect_all(a + a, 6, "vectorized add");
    expect_all(a.narrow(0, 1, n - 1) + 1.0, 4, "unaligned add");  // strided path, int64 indexing
  }
  {
    Tensor c = Tensor::empty({n}, kBytes);
    c.copy_(full({1}, 7.0, kBytes).expand({n}));  // broadcast source: strided path
    expect_all(c, 7, "broadcast copy");
  }
}

TEST(CudaLargeTensors, StridedViewsWithOffsetsPastTwoToThe31Bytes) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = (int64_t{1} << 30) + 18;  // (rows, 2) bytes: offsets pass 2^31
  Tensor e = zeros({rows, 2}, kBytes);
  e.select(1, 0).fill_(9.0);  // every other byte, fewer than 2^31 elements
  std::vector<int64_t> tail = e.narrow(0, rows - 4, 4).reshape({8}).cpu().to(kInt64).to_vector<int64_t>();
  EXPECT_EQ(tail, (std::vector<int64_t>{9, 0, 9, 0, 9, 0, 9, 0}));
  Tensor sum = e.select(1, 0) + e.select(1, 1);  // two strided inputs, dense output
  expect_all(sum, 9, "strided add");
}

}  // namespace
}  // namespace nabla
