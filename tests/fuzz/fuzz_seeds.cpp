// Writes the seed corpora made with nabla's own writers into DIR/<target>/ (tests/fuzz/corpus in the
// repository; the image seeds come from make_image_seeds.py). The same seeds start the mutation
// tests of the CTest suites.
//
//   build/fuzz/tests/fuzz/fuzz_seeds tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/checkpoint_fuzz_body.h"
#include "fuzz/cifar_fuzz_body.h"
#include "fuzz/config_fuzz_body.h"
#include "fuzz/hf_config_fuzz_body.h"
#include "fuzz/idx_fuzz_body.h"
#include "fuzz/safetensors_fuzz_body.h"
#include "fuzz/store_fuzz_body.h"
#include "fuzz/tokens_fuzz_body.h"

namespace fs = std::filesystem;
using Seeds = std::vector<std::pair<std::string, std::string>>;

namespace {

void write(const fs::path& dir, const Seeds& seeds) {
  fs::create_directories(dir);
  for (const auto& [name, bytes] : seeds) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
  }
  std::printf("%s: %zu seeds\n", dir.string().c_str(), seeds.size());
}

std::string text(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR   (writes DIR/<target>/ for each fuzz target)\n");
    return 2;
  }
  try {
    namespace fz = nabla::fuzz;
    const fs::path root = argv[1];
    write(root / "safetensors_fuzz", {{"tensors.safetensors", fz::safetensors_fuzz_seed(1)}});
    const auto idx = fz::idx_fuzz_seed(1);
    write(root / "idx_fuzz", {{"images.idx", text(idx)}, {"images.idx.gz", text(fz::gzip_bytes(idx))}});
    write(root / "tokens_fuzz", fz::tokens_fuzz_seeds());
    write(root / "cifar_fuzz", fz::cifar_fuzz_seeds());
    write(root / "checkpoint_fuzz", {{"checkpoint.safetensors", fz::checkpoint_fuzz_seed()}});
    write(root / "config_fuzz", fz::config_fuzz_seeds());
    write(root / "store_fuzz", {{"requests.bin", fz::store_fuzz_seed()}});
    write(root / "hf_config_fuzz", fz::hf_config_fuzz_seeds());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
