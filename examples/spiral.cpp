// A first nabla program: classify three interleaved spirals with a two-layer MLP, written with
// tensors and autograd only (modules and optimizers come with nabla::nn and nabla::optim).
//
//   ./build/cpu/examples/spiral [--steps N]
//
// Prints the loss and the training accuracy as it learns; a run reaches about 95%+ accuracy.
#include <nabla/nabla.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numbers>

namespace nb = nabla;

namespace {

// Three spirals of `per_class` points each: (x, y) coordinates and int64 labels.
std::pair<nb::Tensor, nb::Tensor> make_spirals(int64_t per_class, nb::Generator& gen) {
  const int64_t n = 3 * per_class;
  auto t = nb::linspace(0.0, 1.0, per_class, {.dtype = nb::kFloat64});          // (P)
  auto noise = nb::randn({3, per_class}, {.dtype = nb::kFloat64}, &gen) * 0.2;  // (3, P)
  std::vector<double> xy(n * 2);
  std::vector<int64_t> labels(n);
  auto tv = t.to_vector<double>();
  auto nv = noise.to_vector<double>();
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < per_class; ++i) {
      double radius = tv[i], angle = 4.0 * tv[i] + c * 2.0 * std::numbers::pi / 3.0 + nv[c * per_class + i];
      int64_t k = c * per_class + i;
      xy[2 * k] = radius * std::cos(angle);
      xy[2 * k + 1] = radius * std::sin(angle);
      labels[k] = c;
    }
  }
  return {nb::tensor(xy, {n, 2}).to(nb::kFloat32), nb::tensor(labels)};
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 1500;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  nb::manual_seed(0);
  nb::Generator gen(0);
  auto [x, y] = make_spirals(200, gen);  // (600, 2), (600)

  const int64_t hidden = 64;
  auto w1 = (nb::randn({2, hidden}, {}, &gen) * std::sqrt(2.0 / 2)).requires_grad_();
  auto b1 = nb::zeros({hidden}).requires_grad_();
  auto w2 = (nb::randn({hidden, 3}, {}, &gen) * std::sqrt(1.0 / hidden)).requires_grad_();
  auto b2 = nb::zeros({3}).requires_grad_();
  std::vector<nb::Tensor> params{w1, b1, w2, b2};

  const double lr = 0.5;
  for (int step = 0; step <= steps; ++step) {
    auto h = nb::relu(nb::matmul(x, w1) + b1);  // (600, 64)
    auto logits = nb::matmul(h, w2) + b2;       // (600, 3)
    auto loss = nb::cross_entropy(logits, y);   // mean over the batch, from logits
    for (auto& p : params) p.set_grad(nb::Tensor());
    loss.backward();
    {
      nb::NoGradGuard no_grad;  // plain SGD
      for (auto& p : params) p.sub_(p.grad(), lr);
    }
    if (step % 250 == 0) {
      auto predicted = nb::argmax(logits, 1);
      double accuracy = nb::eq(predicted, y).to(nb::kFloat64).mean().item<double>();
      std::printf("step %4d  loss %.4f  accuracy %.1f%%\n", step, loss.item<double>(), 100.0 * accuracy);
    }
  }
  return 0;
}
