#include <cmath>
#include <limits>

#include "test_util.h"

namespace nabla {
namespace {

TEST(DType, PromotionFollowsCategoryThenWidth) {
  EXPECT_EQ(promote_types(kInt64, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kFloat32), kFloat32);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kFloat64, kFloat32), kFloat64);
  EXPECT_EQ(promote_types(kBool, kUInt8), kUInt8);
  EXPECT_EQ(promote_types(kUInt8, kInt32), kInt32);
  EXPECT_EQ(promote_types(kInt32, kInt64), kInt64);
  EXPECT_EQ(promote_types(kBool, kBool), kBool);
}

TEST(DType, ParseAcceptsNamesAndAliasesAndRejectsOthers) {
  EXPECT_EQ(parse_dtype("bf16"), kBFloat16);
  EXPECT_EQ(parse_dtype("half"), kFloat16);
  EXPECT_EQ(parse_dtype("int64"), kInt64);
  EXPECT_NABLA_ERROR(parse_dtype("float8"), "unknown dtype 'float8'", "bfloat16");
}

TEST(DType, HalfRoundTripsEveryFiniteValueAndRoundsToNearestEven) {
  // Every finite half converts to float and back to the same bits.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    Half h = Half::from_bits(static_cast<uint16_t>(bits));
    float f = h;
    if (std::isnan(f)) continue;
    EXPECT_EQ(Half(f).bits, bits) << "bits " << bits;
  }
  // Reference values computed by hand: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 -> even (1).
  EXPECT_EQ(Half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00u);
  EXPECT_EQ(Half(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02u);
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00u);               // rounds to inf
  EXPECT_EQ(Half(std::ldexp(1.0f, -24)).bits, 0x0001u);  // smallest subnormal
}

TEST(DType, BFloat16RoundsToNearestEvenAndKeepsNaN) {
  float x = 1.0f + std::ldexp(1.0f, -8);  // halfway between 1 and the next bfloat16
  EXPECT_EQ(BFloat16(x).bits, 0x3f80u);
  EXPECT_EQ(static_cast<float>(BFloat16(3.140625f)), 3.140625f);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Device, ParsesCpuAndCudaIndexAndRejectsGarbage) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_NABLA_ERROR(Device::parse("gpu0"), "invalid device 'gpu0'", "cuda:N");
  EXPECT_NABLA_ERROR(Device::parse("cuda:x"), "invalid device");
}

}  // namespace
}  // namespace nabla
