// Public header. IDX files (MNIST, Fashion-MNIST) and IdxDataset.
//
// An IDX file is a 4-byte magic (0, 0, element type, number of dimensions), one big-endian uint32
// per dimension, then the elements in row-major order. Only unsigned bytes (type 0x08) are used by
// the image datasets, and only those are read. Files may be gzip-compressed (detected by their
// first bytes, not their name), as Debian's dataset-fashion-mnist installs them:
//
//   auto train = nabla::data::IdxDataset::open("/usr/share/datasets/fashion-mnist", /*train=*/true);
//   train->size();          // 60000
//   train->image_shape();   // 28 x 28 x 1
//
// Every problem (missing file, wrong magic, a count that disagrees with the file size, images and
// labels of different lengths, a label outside a known class count) is a DataError naming the
// file and what was wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nabla/data/dataset.h"

namespace nabla::data {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. (N, 28, 28) or (N)
  std::vector<uint8_t> data;  // prod(dims) bytes, row-major
};

// The largest payload parse_idx accepts by default: a header may claim anything, so the claim is
// checked against this before memory grows (and growth follows the bytes actually present).
inline constexpr size_t kMaxIdxBytes = size_t{1} << 36;

// Parses the bytes of an IDX file, raw or gzip. `name` names the source in errors.
IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& name, size_t max_bytes = kMaxIdxBytes);
// Reads and parses a file.
IdxArray read_idx(const std::string& path);

struct IdxOptions {
  // The number of classes when the data set fixes it (10 for MNIST and Fashion-MNIST): a label
  // outside [0, num_classes) is then a DataError naming its index and value. 0 infers the count
  // from the largest label, which is all a generic IDX file allows.
  int64_t num_classes = 0;
};

class IdxDataset final : public ImageDataset {
 public:
  // images: (N, H, W) uint8; labels: (N) uint8.
  IdxDataset(const std::string& images_path, const std::string& labels_path, IdxOptions options = {});
  // The standard file names in `root`: {train,t10k}-{images-idx3,labels-idx1}-ubyte, with or
  // without .gz (and the "images.idx3-ubyte" spelling some mirrors use).
  static std::shared_ptr<IdxDataset> open(const std::string& root, bool train, IdxOptions options = {});

  int64_t size() const override { return count_; }
  ImageShape image_shape() const override { return shape_; }
  int64_t num_classes() const override { return num_classes_; }
  int64_t load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext& context) override;
  std::string describe(int64_t index) const override;

  int64_t label(int64_t index) const;
  std::span<const uint8_t> image(int64_t index) const;
  const std::string& images_path() const { return images_path_; }

 private:
  std::string images_path_, labels_path_;
  IdxArray images_, labels_;
  int64_t count_ = 0;
  ImageShape shape_;
  int64_t num_classes_ = 0;
};

}  // namespace nabla::data
