#include "nabla/apps/train_support/batch_size_finder.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "nabla/core/cuda/memory.h"
#include "nabla/core/error.h"
#include "nabla/core/logging.h"

namespace nabla::train_support {

namespace {

constexpr int64_t kMultiple = 8;  // tensor-core friendly batch sizes (see the header)

// Candidates are numbered 0, 1, ...: batches 1..7, then 8, 16, 24, ... The binary search runs on
// these numbers, so it can only ever land on a candidate.
int64_t candidate_index(int64_t batch) {  // of the largest candidate <= batch (batch >= 1)
  return batch < kMultiple ? batch - 1 : batch / kMultiple + (kMultiple - 2);
}
int64_t candidate(int64_t index) {
  return index < kMultiple - 1 ? index + 1 : kMultiple * (index - (kMultiple - 2));
}

}  // namespace

bool is_batch_size_candidate(int64_t batch) {
  return batch >= 1 && (batch < kMultiple || batch % kMultiple == 0);
}

std::string BatchSizeSearch::report() const {
  std::string trials_text;
  for (const auto& t : trials) {
    trials_text += fmt::format("{}{} {}", trials_text.empty() ? "" : ", ", t.batch, t.fits ? "fits" : "OOM");
  }
  return fmt::format("batch size auto: {}{} (trials: {})", batch, hit_max ? " (the maximum allowed)" : "",
                     trials_text);
}

BatchSizeSearch find_batch_size(const std::function<void(int64_t batch)>& trial,
                                const BatchSizeSearchOptions& options) {
  NABLA_CHECK(trial != nullptr, "find_batch_size: expected a trial function, got an empty one");
  NABLA_CHECK(options.max_batch >= 1, "find_batch_size: max_batch must be at least 1, got {}",
              options.max_batch);
  NABLA_CHECK(options.start >= 1, "find_batch_size: start must be at least 1, got {}", options.start);
  BatchSizeSearch search;
  std::string last_oom;
  auto fits = [&](int64_t index) {
    const int64_t batch = candidate(index);
    bool ok = true;
    try {
      trial(batch);
    } catch (const OutOfMemoryError& e) {
      ok = false;
      last_oom = e.what();
    }
    // Each trial starts from the same empty cache, as training will: a block cached by a larger
    // failed trial must not make a smaller one look as if it did not fit, or the other way round.
    if (options.device.is_cuda()) cuda::empty_cache();
    search.trials.push_back({.batch = batch, .fits = ok});
    NABLA_LOG_DEBUG("batch size auto: trial {} {}", batch, ok ? "fits" : "ran out of memory");
    return ok;
  };

  const int64_t max_index = candidate_index(options.max_batch);
  int64_t fitting = -1;             // index of the largest candidate known to fit
  int64_t failing = max_index + 1;  // index of the smallest known not to fit (or past the maximum)
  // Doubling: cheap when the answer is far from `start`, and never tries more than twice the answer.
  for (int64_t index = std::min(candidate_index(options.start), max_index);;) {
    if (!fits(index)) {
      failing = index;
      break;
    }
    fitting = index;
    if (index == max_index) break;
    index = std::min(candidate_index(2 * candidate(index)), max_index);
  }
  // Binary search strictly between the two.
  while (failing - fitting > 1) {
    const int64_t middle = fitting + (failing - fitting) / 2;
    (fits(middle) ? fitting : failing) = middle;
  }
  if (fitting < 0) {
    throw OutOfMemoryError(fmt::format(
        "--batch-size auto: not even a batch of 1 fits in memory. The last trial failed with: {}", last_oom));
  }
  search.batch = candidate(fitting);
  search.hit_max = fitting == max_index;
  NABLA_LOG_INFO("{}", search.report());
  return search;
}

}  // namespace nabla::train_support
