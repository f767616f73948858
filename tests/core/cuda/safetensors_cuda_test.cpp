// safetensors with CUDA tensors: saving copies them (any layout) to the host as row-major data,
// and loading onto a device gives the same values there.
#include <unistd.h>

#include <filesystem>

#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;

TEST(CudaSafetensors, SavesDeviceTensorsOfAnyLayoutAndLoadsOntoTheDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = test_seed();
  Tensor a = random_input({4, 6}, seed, kFloat32).to(Device::cuda());
  Tensor b = random_input({2, 3, 4, 5}, seed + 1, kFloat16).to(Device::cuda());
  std::map<std::string, Tensor> tensors{
      {"contiguous", a},
      {"transposed", a.transpose(0, 1)},
      {"strided", a.slice(1, 1, 6, 2)},
      {"row", a.select(0, 2)},
      {"channels_last", b.contiguous(MemoryFormat::ChannelsLast)},
      {"int64", (random_input({5}, seed + 2) * 100.0).to(Device::cuda(), kInt64)},
      {"empty", Tensor::empty({0, 3}, {.dtype = kFloat32, .device = Device::cuda()})},
  };
  ASSERT_FALSE(tensors["transposed"].is_contiguous());
  ASSERT_FALSE(tensors["channels_last"].is_contiguous());
  auto path =
      std::filesystem::temp_directory_path() / fmt::format("nabla_cuda_st_{}.safetensors", ::getpid());
  save_safetensors(path.string(), tensors);
  auto on_host = load_safetensors(path.string());
  auto on_device = load_safetensors(path.string(), Device::cuda());
  std::filesystem::remove(path);
  ASSERT_EQ(on_host.tensors.size(), tensors.size());
  ASSERT_EQ(on_device.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const Tensor& h = on_host.tensors.at(name);
    const Tensor& d = on_device.tensors.at(name);
    EXPECT_TRUE(h.is_cpu());
    EXPECT_EQ(d.device(), Device::cuda());
    EXPECT_EQ(h.dtype(), t.dtype());
    EXPECT_EQ(d.dtype(), t.dtype());
    EXPECT_EQ(h.sizes(), t.sizes());
    EXPECT_EQ(d.sizes(), t.sizes());
    EXPECT_TRUE(h.is_contiguous());
    EXPECT_TRUE(all_close(h, t, 0, 0));
    EXPECT_TRUE(all_close(d, t, 0, 0));
  }
}

}  // namespace
}  // namespace nabla
