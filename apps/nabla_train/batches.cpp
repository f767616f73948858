#include "nabla_train/batches.h"

#include <algorithm>

#include "nabla/data/device_prefetcher.h"

namespace nabla::train {

std::vector<int64_t> ResumeSampler::indices_for_epoch(int64_t epoch) const {
  auto indices = inner_->indices_for_epoch(epoch);
  if (epoch == skip_epoch_) {
    const auto skip =
        static_cast<size_t>(std::min<int64_t>(skip_samples_, static_cast<int64_t>(indices.size())));
    indices.erase(indices.begin(), indices.begin() + static_cast<std::ptrdiff_t>(skip));
  }
  return indices;
}

BatchSource::BatchSource(std::shared_ptr<data::Dataset> dataset,
                         const data::DataLoaderOptions& loader_options,
                         const data::NormalizeOptions& normalize, Device device)
    : loader_(std::make_unique<data::DataLoader>(std::move(dataset), loader_options)),
      normalize_(normalize),
      device_(device) {
  if (device_.is_cuda()) {
    prefetcher_ = std::make_unique<data::DevicePrefetcher>(
        *loader_, data::PrefetchOptions{.device = device_.index, .depth = 2, .normalize = normalize_});
  }
}

BatchSource::~BatchSource() = default;

void BatchSource::start_epoch(int64_t epoch) {
  loader_->set_epoch(epoch);
  if (prefetcher_) {
    prefetcher_->start_epoch();
  } else {
    loader_->start_epoch();
  }
}

std::optional<TrainBatch> BatchSource::next() {
  if (prefetcher_) {
    auto batch = prefetcher_->next();
    if (!batch) return std::nullopt;
    return TrainBatch{.input = batch->input, .target = batch->target, .wait_seconds = batch->wait_seconds};
  }
  auto batch = loader_->next();
  if (!batch) return std::nullopt;
  return TrainBatch{.input = data::normalize_images(batch->input, normalize_),
                    .target = batch->target,
                    .wait_seconds = batch->wait_seconds};
}

}  // namespace nabla::train
