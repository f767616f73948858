// Uses the installed headers and libraries: a tiny autograd computation whose gradient is known
// in closed form. Exits non-zero on any mismatch.
#include <nabla/nabla.h>

#include <cmath>
#include <cstdio>

int main() {
  namespace nb = nabla;
  auto x = nb::arange(1.0, 5.0, 1.0, {.dtype = nb::kFloat64}).requires_grad_();  // 1, 2, 3, 4
  auto loss = (x * x).sum();                                                     // d/dx = 2x
  loss.backward();
  auto g = x.grad().to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    if (std::abs(g[i] - 2.0 * (i + 1)) > 1e-12) {
      std::printf("wrong gradient at %d: %f\n", i, g[i]);
      return 1;
    }
  }
  std::printf("consumer ok: loss %.1f, cuda available: %d\n", loss.item<double>(),
              nb::cuda::is_available() ? 1 : 0);
  return 0;
}
