// Where the training loop gets its batches: the data loader, and on a GPU the device prefetcher
// (upload + normalize on a copy stream), on the CPU a normalize of the loader's uint8 batch. The
// loop sees one interface either way.
//
// ResumeSampler makes resumption exact: it wraps the epoch's sampler and leaves out the samples
// the interrupted run had already trained on in that epoch, so the resumed run sees the same
// batches in the same order (samplers are pure functions of seed and epoch, data/sampler.h).
#pragma once

#include <memory>
#include <optional>

#include "nabla/data/data_loader.h"
#include "nabla/data/normalize.h"
#include "nabla/data/sampler.h"

namespace nabla::data {
class DevicePrefetcher;
}

namespace nabla::train {

class ResumeSampler final : public data::Sampler {
 public:
  explicit ResumeSampler(std::shared_ptr<data::Sampler> inner) : inner_(std::move(inner)) {}
  // In epoch `epoch` only, the first `samples` indices are left out.
  void skip_in_epoch(int64_t epoch, int64_t samples) {
    skip_epoch_ = epoch;
    skip_samples_ = samples;
  }
  int64_t size() const override { return inner_->size(); }
  std::vector<int64_t> indices_for_epoch(int64_t epoch) const override;

 private:
  std::shared_ptr<data::Sampler> inner_;
  int64_t skip_epoch_ = -1;
  int64_t skip_samples_ = 0;
};

struct TrainBatch {
  Tensor input;   // normalized, on the training device, in the model's dtype and layout
  Tensor target;  // int64 labels on the training device
  double wait_seconds = 0;
};

class BatchSource {
 public:
  BatchSource(std::shared_ptr<data::Dataset> dataset, const data::DataLoaderOptions& loader_options,
              const data::NormalizeOptions& normalize, Device device);
  ~BatchSource();
  void start_epoch(int64_t epoch);
  std::optional<TrainBatch> next();
  int64_t batches_per_epoch() const { return loader_->size(); }
  data::DataLoader& loader() { return *loader_; }

 private:
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<data::DevicePrefetcher> prefetcher_;
  data::NormalizeOptions normalize_;
  Device device_;
};

}  // namespace nabla::train
