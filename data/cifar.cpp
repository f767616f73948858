// CifarDataset (see cifar.h). Files are read whole and validated (size a multiple of the record,
// labels in range) at construction; load_into only transposes CHW planes to HWC.
#include "nabla/data/cifar.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "nabla/data/detail/byte_source.h"
#include "nabla/data/error.h"

namespace nabla::data {

namespace fs = std::filesystem;

CifarDataset::CifarDataset(const std::vector<std::string>& files, CifarOptions options) : options_(options) {
  NABLA_CHECK(!files.empty(), "CifarDataset: needs at least one .bin file");
  for (const auto& path : files) append_file(read_file_bytes(path), path);
}

std::shared_ptr<CifarDataset> CifarDataset::parse(std::span<const uint8_t> bytes, const std::string& name,
                                                  CifarOptions options) {
  std::shared_ptr<CifarDataset> dataset(new CifarDataset(options));
  dataset->append_file(bytes, name);
  return dataset;
}

void CifarDataset::append_file(std::span<const uint8_t> bytes, const std::string& name) {
  const bool hundred = options_.variant == CifarVariant::cifar100;
  const size_t label_bytes = hundred ? 2 : 1;
  const size_t record = label_bytes + kImageBytes;
  const int64_t classes = num_classes();
  if (bytes.empty()) throw DataError(-1, name, "the CIFAR file is empty");
  if (bytes.size() % record != 0) {
    throw DataError(
        -1, name,
        fmt::format("a CIFAR-{} file is a whole number of {}-byte records, but this one is {} bytes "
                    "({} records and {} bytes over): truncated, or the wrong variant",
                    hundred ? 100 : 10, record, bytes.size(), bytes.size() / record, bytes.size() % record));
  }
  // Checked whole before anything is kept, so a bad file leaves the dataset as it was.
  const size_t records = bytes.size() / record;
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes.data() + r * record;
    const uint8_t label = hundred ? rec[options_.fine_labels ? 1 : 0] : rec[0];
    if (label >= classes) {
      throw DataError(
          -1, name,
          fmt::format("record {} has label {}, outside [0, {}) for this variant", r, label, classes));
    }
  }
  files_.push_back(name);
  file_starts_.push_back(size());
  labels_.reserve(labels_.size() + records);
  planes_.reserve(planes_.size() + records * kImageBytes);
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes.data() + r * record;
    labels_.push_back(hundred ? rec[options_.fine_labels ? 1 : 0] : rec[0]);
    planes_.insert(planes_.end(), rec + label_bytes, rec + record);
  }
}

std::shared_ptr<CifarDataset> CifarDataset::open(const std::string& root, bool train, CifarOptions options) {
  if (!fs::is_directory(root))
    throw DataError(-1, root, "the CIFAR folder does not exist (or is not a folder)");
  std::vector<std::string> names;
  if (options.variant == CifarVariant::cifar100) {
    names = {train ? "train.bin" : "test.bin"};
  } else if (train) {
    for (int i = 1; i <= 5; ++i) names.push_back(fmt::format("data_batch_{}.bin", i));
  } else {
    names = {"test_batch.bin"};
  }
  std::vector<std::string> files;
  for (const auto& name : names) {
    fs::path p = fs::path(root) / name;
    if (!fs::is_regular_file(p))
      throw DataError(-1, p.string(), "missing CIFAR file (expected the binary version's names)");
    files.push_back(p.string());
  }
  return std::make_shared<CifarDataset>(std::move(files), options);
}

int64_t CifarDataset::num_classes() const {
  if (options_.variant == CifarVariant::cifar10) return 10;
  return options_.fine_labels ? 100 : 20;
}

int64_t CifarDataset::load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext&) {
  NABLA_CHECK(index >= 0 && index < size(), "CifarDataset: index {} out of range [0, {})", index, size());
  NABLA_CHECK(pixels.size() == static_cast<size_t>(kImageBytes),
              "CifarDataset::load_into: slot of {} bytes, need {}", pixels.size(), kImageBytes);
  const uint8_t* src = planes_.data() + static_cast<size_t>(index) * kImageBytes;  // (3, 32, 32)
  constexpr int64_t plane = kSide * kSide;
  for (int64_t p = 0; p < plane; ++p) {
    for (int64_t c = 0; c < 3; ++c) pixels[static_cast<size_t>(p * 3 + c)] = src[c * plane + p];
  }
  return labels_[static_cast<size_t>(index)];
}

std::string CifarDataset::describe(int64_t index) const {
  if (index < 0 || index >= size()) return fmt::format("CIFAR sample {} (out of range)", index);
  auto it = std::upper_bound(file_starts_.begin(), file_starts_.end(), index);
  size_t file = static_cast<size_t>(it - file_starts_.begin()) - 1;
  return fmt::format("{}[record {}]", files_[file], index - file_starts_[file]);
}

}  // namespace nabla::data
