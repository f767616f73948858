// IdxDataset (see idx.h): an images file and a labels file, checked against each other once at
// construction; samples are then plain memcpy out of memory (60000 Fashion-MNIST images are 47 MB).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "nabla/data/error.h"
#include "nabla/data/idx.h"

namespace nabla::data {

namespace fs = std::filesystem;

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path, IdxOptions options)
    : images_path_(images_path), labels_path_(labels_path) {
  images_ = read_idx(images_path);
  labels_ = read_idx(labels_path);
  if (images_.dims.size() != 3) {
    throw DataError(
        -1, images_path,
        fmt::format("an IDX images file must have 3 dimensions (count, rows, columns), this one has {}",
                    images_.dims.size()));
  }
  if (labels_.dims.size() != 1) {
    throw DataError(-1, labels_path,
                    fmt::format("an IDX labels file must have 1 dimension (count), this one has {}",
                                labels_.dims.size()));
  }
  if (images_.dims[0] != labels_.dims[0]) {
    throw DataError(-1, images_path,
                    fmt::format("the images file holds {} images but the labels file {} holds {} labels",
                                images_.dims[0], labels_path, labels_.dims[0]));
  }
  count_ = images_.dims[0];
  if (count_ == 0) throw DataError(-1, images_path, "the IDX images file holds no images");
  if (images_.dims[1] == 0 || images_.dims[2] == 0) {
    throw DataError(-1, images_path,
                    fmt::format("images of {} x {} pixels are empty", images_.dims[1], images_.dims[2]));
  }
  shape_ = {.height = images_.dims[1], .width = images_.dims[2], .channels = 1};
  if (options.num_classes < 0) {
    throw DataError(-1, labels_path,
                    fmt::format("IdxOptions::num_classes is {}; it must be positive, or 0 to infer it",
                                options.num_classes));
  }
  if (options.num_classes == 0) {
    num_classes_ = 1 + *std::max_element(labels_.data.begin(), labels_.data.end());
    return;
  }
  num_classes_ = options.num_classes;
  for (size_t i = 0; i < labels_.data.size(); ++i) {
    if (labels_.data[i] >= num_classes_) {
      throw DataError(static_cast<int64_t>(i), labels_path,
                      fmt::format("label {} of sample {} is outside [0, {}), the classes of this data set",
                                  labels_.data[i], i, num_classes_));
    }
  }
}

std::shared_ptr<IdxDataset> IdxDataset::open(const std::string& root, bool train, IdxOptions options) {
  if (!fs::is_directory(root)) {
    throw DataError(-1, root, "the IDX dataset folder does not exist (or is not a folder)");
  }
  const std::string prefix = train ? "train" : "t10k";
  auto find = [&](const std::string& kind, int dims) {
    for (const char* sep : {"-", "."}) {
      for (const char* ext : {"", ".gz"}) {
        fs::path p = fs::path(root) / fmt::format("{}-{}{}idx{}-ubyte{}", prefix, kind, sep, dims, ext);
        if (fs::is_regular_file(p)) return p.string();
      }
    }
    throw DataError(
        -1, root,
        fmt::format("no {0}-{1}-idx{2}-ubyte (or .gz) in the folder; expected the MNIST file names, e.g. "
                    "{0}-{1}-idx{2}-ubyte.gz",
                    prefix, kind, dims));
  };
  std::string images = find("images", 3);  // images first, so that is the one reported missing
  std::string labels = find("labels", 1);
  return std::make_shared<IdxDataset>(images, labels, options);
}

int64_t IdxDataset::label(int64_t index) const {
  NABLA_CHECK(index >= 0 && index < count_, "IdxDataset: index {} out of range [0, {})", index, count_);
  return labels_.data[static_cast<size_t>(index)];
}

std::span<const uint8_t> IdxDataset::image(int64_t index) const {
  NABLA_CHECK(index >= 0 && index < count_, "IdxDataset: index {} out of range [0, {})", index, count_);
  auto bytes = static_cast<size_t>(shape_.bytes());
  return {images_.data.data() + static_cast<size_t>(index) * bytes, bytes};
}

int64_t IdxDataset::load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext&) {
  auto src = image(index);
  NABLA_CHECK(pixels.size() == src.size(), "IdxDataset::load_into: the slot holds {} bytes, an image is {}",
              pixels.size(), src.size());
  std::memcpy(pixels.data(), src.data(), src.size());
  return label(index);
}

std::string IdxDataset::describe(int64_t index) const {
  return fmt::format("{}[{}]", images_path_, index);
}

}  // namespace nabla::data
