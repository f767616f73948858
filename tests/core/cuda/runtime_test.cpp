// CUDA device runtime: devices, device memory, copies both ways and errors. Every case skips
// itself when no GPU is present (CI); they run on the GPU test machine.
#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device"

TEST(CudaRuntime, ReportsDevicesAndRejectsBadIndices) {
  SKIP_WITHOUT_GPU();
  EXPECT_GE(cuda::device_count(), 1);
  EXPECT_EQ(cuda::current_device(), 0);
  EXPECT_NABLA_ERROR(cuda::set_device(cuda::device_count()), "does not exist");
  EXPECT_NABLA_ERROR(Tensor::empty({4}, {.device = Device::cuda(99)}), "CUDA device 99 does not exist");
}

TEST(CudaRuntime, CopiesRoundTripEveryDtypeAndLayout) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64}) {
    Tensor host = random_input({2, 3, 4, 5}, ++seed, kFloat64).mul_(10.0).to(dtype);
    Tensor dev = host.to(Device::cuda());
    EXPECT_TRUE(dev.is_cuda());
    EXPECT_NE(dev.data_ptr(), host.data_ptr());
    EXPECT_TRUE(all_close(dev.cpu(), host, 0, 0)) << dtype_name(dtype);
    // Strided and channels_last sources keep their values (and channels_last its layout).
    Tensor cl = host.contiguous(MemoryFormat::ChannelsLast).to(Device::cuda());
    EXPECT_TRUE(cl.is_contiguous(MemoryFormat::ChannelsLast));
    EXPECT_TRUE(all_close(cl.cpu(), host, 0, 0));
    Tensor strided = dev.permute({3, 1, 0, 2});
    EXPECT_TRUE(all_close(strided.cpu(), host.permute({3, 1, 0, 2}), 0, 0));
  }
}

TEST(CudaRuntime, ConvertsDtypeOnTheWayAndReadsItems) {
  SKIP_WITHOUT_GPU();
  Tensor x = random_input({7, 3}, test_seed(), kFloat64);
  Tensor d = x.to(Device::cuda(), kFloat32);
  EXPECT_EQ(d.dtype(), kFloat32);
  EXPECT_TRUE(all_close(d.cpu(), x, 1e-6, 1e-7));
  EXPECT_FLOAT_EQ(d.select(0, 2).select(0, 1).item<float>(), static_cast<float>(x.to_vector<double>()[7]));
  Tensor z = zeros({1000}, {.device = Device::cuda()});
  EXPECT_EQ(z.cpu().abs().sum().item<double>(), 0.0);
  Tensor r = randn({1000}, {.device = Device::cuda()});
  EXPECT_GT(r.cpu().abs().sum().item<double>(), 100.0);
}

TEST(CudaRuntime, GradientsFlowAcrossDeviceCopies) {
  SKIP_WITHOUT_GPU();
  Tensor x = random_input({4, 3}, test_seed(), kFloat64, true);
  Tensor back = x.to(Device::cuda()).cpu();  // copies both ways under autograd
  (back * back).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), x.detach() * 2.0, 1e-12));
}

TEST(CudaRuntime, AnImpossibleAllocationThrowsOutOfMemoryAndTheDeviceStaysUsable) {
  SKIP_WITHOUT_GPU();
  EXPECT_THROW(Tensor::empty({int64_t{1} << 50}, {.dtype = kFloat32, .device = Device::cuda()}),
               OutOfMemoryError);
  Tensor after = ones({16}, {.device = Device::cuda()});
  EXPECT_EQ(after.cpu().sum().item<double>(), 16.0);
}

TEST(CudaRuntime, MixingDevicesInOneOpIsAClearError) {
  SKIP_WITHOUT_GPU();
  Tensor d = ones({4}, {.device = Device::cuda()});
  EXPECT_NABLA_ERROR(add(d, ones({4})), "add", "one device", "cuda:0", "cpu");
}

}  // namespace
}  // namespace nabla
