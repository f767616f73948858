// SyntheticDataset (see synthetic.h). Pool pixels and per-sample choices come from Philox with
// separate counters, so they are independent streams of the one seed.
#include "nabla/data/synthetic.h"

#include <cstring>

#include "nabla/core/error.h"
#include "nabla/core/philox.h"

namespace nabla::data {

namespace {
// Counter bases that keep the three uses of the seed's Philox key apart.
constexpr uint64_t kPixelStream = 0;
constexpr uint64_t kPoolChoiceStream = uint64_t{1} << 62;
constexpr uint64_t kLabelStream = uint64_t{2} << 62;

uint64_t draw(uint64_t seed, uint64_t counter) {
  philox::Block b = philox::philox4x32_10(counter, seed);
  return (uint64_t{b.v[0]} << 32) | b.v[1];
}
}  // namespace

SyntheticDataset::SyntheticDataset(SyntheticOptions options) : options_(options) {
  const auto& s = options_.shape;
  NABLA_CHECK(options_.size >= 1, "SyntheticDataset: size must be >= 1, got {}", options_.size);
  NABLA_CHECK(s.height >= 1 && s.width >= 1 && s.channels >= 1,
              "SyntheticDataset: image shape must be positive, got {} x {} x {}", s.height, s.width,
              s.channels);
  NABLA_CHECK(options_.num_classes >= 1, "SyntheticDataset: num_classes must be >= 1, got {}",
              options_.num_classes);
  NABLA_CHECK(options_.distinct_images >= 1, "SyntheticDataset: distinct_images must be >= 1, got {}",
              options_.distinct_images);
  pool_.resize(static_cast<size_t>(options_.distinct_images * s.bytes()));
  for (size_t i = 0; i < pool_.size(); i += 16) {
    philox::Block b = philox::philox4x32_10(kPixelStream + i / 16, options_.seed);
    uint8_t bytes[16];
    std::memcpy(bytes, b.v, 16);
    std::memcpy(pool_.data() + i, bytes, std::min<size_t>(16, pool_.size() - i));
  }
}

int64_t SyntheticDataset::pool_index(int64_t index) const {
  return static_cast<int64_t>(draw(options_.seed, kPoolChoiceStream + static_cast<uint64_t>(index)) %
                              static_cast<uint64_t>(options_.distinct_images));
}

int64_t SyntheticDataset::label(int64_t index) const {
  return static_cast<int64_t>(draw(options_.seed, kLabelStream + static_cast<uint64_t>(index)) %
                              static_cast<uint64_t>(options_.num_classes));
}

const uint8_t* SyntheticDataset::pool_image(int64_t pool_index) const {
  return pool_.data() + static_cast<size_t>(pool_index * options_.shape.bytes());
}

int64_t SyntheticDataset::load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext&) {
  NABLA_CHECK(index >= 0 && index < size(), "SyntheticDataset: index {} out of range [0, {})", index, size());
  NABLA_CHECK(pixels.size() == static_cast<size_t>(options_.shape.bytes()),
              "SyntheticDataset::load_into: slot of {} bytes, an image is {}", pixels.size(),
              options_.shape.bytes());
  std::memcpy(pixels.data(), pool_image(pool_index(index)), pixels.size());
  return label(index);
}

}  // namespace nabla::data
