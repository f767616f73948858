// A custom model with the public API only: a small residual CNN, trained on a synthetic task
// (which quadrant of the image is brightest), on the GPU when there is one. It then saves a
// checkpoint, loads it into a fresh model and checks that both predict the same.
//
//   ./build/cpu/examples/custom_model [--steps N] [--checkpoint FILE]
#include <nabla/nabla.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace nb = nabla;

// conv-bn-relu-conv-bn, plus the input, then relu. (N, C, H, W) -> (N, C, H, W).
struct Block : nb::nn::Module {
  nb::nn::Conv2d conv1, conv2;
  nb::nn::BatchNorm2d bn1, bn2;

  explicit Block(int64_t c)
      : conv1({.in = c, .out = c, .kernel = 3, .padding = 1, .bias = false}),
        conv2({.in = c, .out = c, .kernel = 3, .padding = 1, .bias = false}),
        bn1(c),
        bn2(c) {
    register_modules({{"conv1", conv1}, {"bn1", bn1}, {"conv2", conv2}, {"bn2", bn2}});
  }

  nb::Tensor forward(const nb::Tensor& x) override {
    auto y = nb::relu(bn1(conv1(x)));
    return nb::relu(bn2(conv2(y)) + x);
  }
};

// stem conv -> two residual blocks -> global average pool -> linear. (N, 3, 16, 16) -> (N, 4).
struct Net : nb::nn::Module {
  nb::nn::Conv2d stem;
  Block block1, block2;
  nb::nn::Linear fc;

  Net()
      : stem({.in = 3, .out = 16, .kernel = 3, .padding = 1}),
        block1(16),
        block2(16),
        fc({.in = 16, .out = 4}) {
    register_modules({{"stem", stem}, {"block1", block1}, {"block2", block2}, {"fc", fc}});
  }

  nb::Tensor forward(const nb::Tensor& x) override {
    auto h = block2(block1(nb::relu(stem(x))));
    return fc(h.mean({2, 3}));  // (N, 16)
  }
};

// Images of noise with one bright quadrant; the label is that quadrant (0..3).
std::pair<nb::Tensor, nb::Tensor> make_data(int64_t n, nb::Generator& gen) {
  auto labels = nb::randint(0, 4, {n}, {.dtype = nb::kInt64}, &gen);
  auto images = nb::rand({n, 3, 16, 16}, {}, &gen) * 0.5;
  auto label_values = labels.to_vector<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t q = label_values[i];
    auto quadrant = images.select(0, i).narrow(1, (q / 2) * 8, 8).narrow(2, (q % 2) * 8, 8);
    quadrant.add_(1.0);
  }
  return {images, labels};
}

int main(int argc, char** argv) {
  int steps = 40;
  std::string checkpoint = "custom_model.safetensors";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--checkpoint") == 0) checkpoint = argv[i + 1];
  }
  nb::manual_seed(0);
  nb::Generator gen(0);
  auto device = nb::cuda::is_available() ? nb::Device::cuda() : nb::Device::cpu();

  Net model;
  model.to(device);
  auto opt = nb::optim::SGD(model.parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
  auto [images, labels] = make_data(128, gen);
  images = images.to(device);
  labels = labels.to(device);

  for (int step = 1; step <= steps; ++step) {
    auto loss = nb::cross_entropy(model(images), labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 20 == 0) std::printf("step %3d  loss %.4f\n", step, loss.item<double>());
  }

  model.eval();
  auto predicted = nb::argmax(model(images), 1);
  double accuracy = nb::eq(predicted, labels).to(nb::kFloat64).mean().item<double>();
  std::printf("train accuracy %.1f%% on %s\n", 100.0 * accuracy, device.str().c_str());

  nb::save_safetensors(checkpoint, model.state_dict(), {{"example", "custom_model"}});
  Net restored;
  restored.load_state_dict(nb::load_safetensors(checkpoint).tensors);
  restored.to(device);
  restored.eval();
  bool same = nb::eq(nb::argmax(restored(images), 1), predicted).to(nb::kInt64).sum().item<int64_t>() == 128;
  std::printf("checkpoint %s: restored model %s\n", checkpoint.c_str(),
              same ? "predicts the same" : "DIFFERS");
  return same && accuracy > 0.9 ? 0 : 1;
}
