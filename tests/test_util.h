// Shared test helpers: seeded random inputs and comparisons against references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "nabla/nabla.h"
#include "test_paths.h"

namespace nabla::testing {

// A fresh seed per test case, derived from the test's name, so every case draws its own inputs
// and a failure is reproducible.
inline uint64_t test_seed() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  return std::hash<std::string>{}(name);
}

// Random non-zero float64 values in [-2, -0.1] U [0.1, 2] (never zero, which hides bugs).
inline Tensor random_input(const Shape& sizes, uint64_t seed, DType dtype = kFloat64,
                           bool requires_grad = false) {
  Generator gen(seed);
  Tensor u = rand(sizes, {.dtype = kFloat64}, &gen);
  Tensor s = rand(sizes, {.dtype = kFloat64}, &gen);
  std::vector<double> v = u.to_vector<double>(), sign = s.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = (0.1 + 1.9 * v[i]) * (sign[i] < 0.5 ? -1.0 : 1.0);
  Tensor t = tensor<double>(v, sizes).to(dtype);
  if (requires_grad) t.requires_grad_(true);
  return t;
}

// Max |a - b| <= atol + rtol * |b|, element by element, with the first failure reported.
inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-6,
                                            double atol = 1e-8) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << "shape " << shape_str(actual.sizes()) << " != expected " << shape_str(expected.sizes());
  }
  std::vector<double> a = actual.to(Device::cpu(), kFloat64).contiguous().to_vector<double>();
  std::vector<double> b = expected.to(Device::cpu(), kFloat64).contiguous().to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    bool same_special = (std::isnan(a[i]) && std::isnan(b[i])) || (std::isinf(a[i]) && a[i] == b[i]);
    if (!same_special && !(std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i]))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " != expected " << b[i]
                                           << " (rtol " << rtol << ", atol " << atol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Expects `statement` to throw nabla::Error whose message contains every fragment.
#define EXPECT_NABLA_ERROR(statement, ...)                                    \
  do {                                                                        \
    try {                                                                     \
      statement;                                                              \
      ADD_FAILURE() << "expected nabla::Error from " #statement;              \
    } catch (const ::nabla::Error& e) {                                       \
      for (const char* fragment : {__VA_ARGS__}) {                            \
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)    \
            << "message \"" << e.what() << "\" lacks \"" << fragment << "\""; \
      }                                                                       \
    }                                                                         \
  } while (0)

}  // namespace nabla::testing
