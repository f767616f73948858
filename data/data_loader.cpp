// DataLoader (see data_loader.h and docs/design/data.md, "Note [Loader window]").
//
// One pass is an Engine: the epoch's sample order, a ring of `prefetch` slots (one per batch in
// flight), and the worker threads. Workers claim sample positions in order under one mutex; a
// position may be claimed only while its batch lies inside the window
// [delivered, delivered + prefetch), which is the back-pressure that bounds memory. Each worker
// then loads its sample outside the lock, straight into the slot. The caller takes batches in
// order from the ring, whatever order the workers finished in. Stopping sets a flag, wakes
// everyone and joins; a worker finishes at most the one sample in hand.
#include "nabla/data/data_loader.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <thread>

#include "nabla/core/logging.h"
#include "nabla/data/detail/loader_slot.h"
#include "nabla/data/error.h"

namespace nabla::data {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

struct DataLoader::Engine {
  Engine(DataLoader& loader, int64_t epoch) : loader(loader), epoch(epoch) {
    const auto& options = loader.options_;
    order = loader.sampler_->indices_for_epoch(epoch);
    const int64_t dataset_size = loader.dataset_->size();
    for (int64_t index : order) {
      NABLA_CHECK(
          index >= 0 && index < dataset_size,
          "DataLoader: the sampler gave index {} but the dataset has {} samples (was the sampler built "
          "for another dataset size?)",
          index, dataset_size);
    }
    batch_size = options.batch_size;
    auto n = static_cast<int64_t>(order.size());
    num_batches = options.drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
    total_positions = std::min(n, num_batches * batch_size);
    slots.resize(static_cast<size_t>(options.prefetch));
    try {
      for (int i = 0; i < options.num_workers; ++i) workers.emplace_back([this, i] { worker_loop(i); });
    } catch (...) {
      stop();  // join the threads already started before giving up
      throw;
    }
  }
  ~Engine() { stop(); }

  void stop() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    work_cv.notify_all();
    ready_cv.notify_all();
    for (auto& t : workers) {
      if (t.joinable()) t.join();
    }
  }

  Slot& slot_of(int64_t batch) { return slots[static_cast<size_t>(batch % loader.options_.prefetch)]; }

  // Under the lock: true when a position can be claimed now (or never again).
  bool may_claim() const {
    return next_position < total_positions &&
           next_position / batch_size < delivered + loader.options_.prefetch;
  }

  // Under the lock: claims the next position, opening its batch's slot at the first one.
  // Opening may throw (out of memory); the position is taken only once the slot is ready.
  int64_t claim() {
    int64_t position = next_position;
    int64_t batch = position / batch_size;
    if (position % batch_size == 0) {
      int64_t count = std::min(batch_size, total_positions - position);
      const auto& options = loader.options_;
      slot_of(batch).open(batch, count,
                          {.image_dataset = loader.image_dataset_,
                           .pool = &loader.pool_,
                           .batch_size = batch_size,
                           .pin_memory = options.pin_memory,
                           .defer_decode = options.defer_decode});
      ++opened;
      std::lock_guard stats_lock(loader.stats_mutex_);
      loader.stats_.max_in_flight = std::max(loader.stats_.max_in_flight, in_flight());
    }
    ++next_position;
    return position;
  }
  int64_t in_flight() const { return opened - delivered; }

  // Loads one position into its slot (outside the lock), then marks it done.
  void load(int64_t position, int worker) {
    int64_t batch = position / batch_size;
    Slot& slot = slot_of(batch);
    int64_t row = position % batch_size;
    int64_t index = order[static_cast<size_t>(position)];
    const auto& options = loader.options_;
    SampleContext context{.seed = options.seed, .epoch = epoch, .index = index, .worker = worker};
    SampleLoad result =
        load_sample(*loader.dataset_, loader.image_dataset_, options.on_bad_sample, slot, row, context);
    bool last = false;
    {
      std::lock_guard lock(mutex);
      if (result.error && (!slot.error || row < slot.error_row)) {
        slot.error = result.error;
        slot.error_row = row;
      }
      last = ++slot.done == slot.count;
    }
    if (result.skipped > 0) {
      std::lock_guard stats_lock(loader.stats_mutex_);
      loader.stats_.skipped += result.skipped;
    }
    if (last) {
      slot.finish(loader.options_.collate, loader.options_.pin_memory);  // collate, outside the lock
      {
        std::lock_guard lock(mutex);
        slot.complete = true;
      }
      ready_cv.notify_all();
    }
  }

  void worker_loop(int worker) {
    for (;;) {
      int64_t position = 0;
      {
        std::unique_lock lock(mutex);
        work_cv.wait(lock, [&] { return stopping || next_position >= total_positions || may_claim(); });
        if (stopping || next_position >= total_positions) return;
        try {
          position = claim();
        } catch (...) {
          // Not a sample's fault (no memory for a batch buffer): end the pass, tell the caller.
          fatal = std::current_exception();
          stopping = true;
          ready_cv.notify_all();
          work_cv.notify_all();
          return;
        }
      }
      load(position, worker);
    }
  }

  // The caller's side: the next batch in order, or nothing at the end of the pass.
  std::optional<Batch> next() {
    std::unique_lock lock(mutex);
    if (finished) return std::nullopt;
    if (delivered >= num_batches) {
      finished = true;
      lock.unlock();
      stop();
      return std::nullopt;
    }
    const int64_t batch = delivered;
    Slot& slot = slot_of(batch);
    auto start = Clock::now();
    if (workers.empty()) {
      // No workers: load the head batch here; its positions are the next ones to claim.
      while (!(slot.number == batch && slot.complete)) {
        int64_t position = claim();
        lock.unlock();
        load(position, 0);
        lock.lock();
      }
    } else {
      ready_cv.wait(lock, [&] { return stopping || (slot.number == batch && slot.complete); });
      if (fatal) {
        finished = true;
        std::exception_ptr error = fatal;
        lock.unlock();
        stop();
        std::rethrow_exception(error);
      }
      if (stopping) return std::nullopt;  // stop() from another thread
    }
    double waited = std::chrono::duration<double>(Clock::now() - start).count();
    std::exception_ptr error = slot.error;
    Batch out = slot.take();
    out.epoch = epoch;
    out.number = batch;
    out.wait_seconds = waited;
    ++delivered;
    lock.unlock();
    work_cv.notify_all();
    if (error) {
      finished = true;
      stop();
      std::rethrow_exception(error);
    }
    return out;
  }

  DataLoader& loader;
  const int64_t epoch;
  std::vector<int64_t> order;
  int64_t batch_size = 1;
  int64_t num_batches = 0;
  int64_t total_positions = 0;

  std::mutex mutex;
  std::condition_variable work_cv;   // workers: the window moved, or stop
  std::condition_variable ready_cv;  // caller: a batch completed, or stop
  std::vector<Slot> slots;
  int64_t next_position = 0;
  int64_t opened = 0;     // batches whose slot has been opened
  int64_t delivered = 0;  // batches handed to the caller
  bool stopping = false;
  bool finished = false;
  std::exception_ptr fatal;  // a worker could not open a batch
  std::vector<std::thread> workers;
};

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)), pool_(options_.pin_memory) {
  NABLA_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  NABLA_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got {}", options_.batch_size);
  NABLA_CHECK(options_.num_workers >= 0,
              "DataLoader: num_workers must be >= 0 (0 loads in the caller's thread), got {}",
              options_.num_workers);
  NABLA_CHECK(options_.prefetch >= 1, "DataLoader: prefetch (batches in flight) must be >= 1, got {}",
              options_.prefetch);
  if (!options_.collate) image_dataset_ = dynamic_cast<ImageDataset*>(dataset_.get());
  NABLA_CHECK(!options_.defer_decode || image_dataset_ != nullptr,
              "DataLoader: defer_decode needs an ImageDataset (such as ImageFolder) and no custom collate");
  if (options_.defer_decode) {
    const ImageShape shape = image_dataset_->image_shape();
    NABLA_CHECK(shape.channels == 3 && shape.height == shape.width,
                "DataLoader: defer_decode needs square RGB images (the GPU decoder's output), got {}x{}x{}",
                shape.height, shape.width, shape.channels);
  }
  if (options_.sampler) {
    sampler_ = options_.sampler;
  } else if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

DataLoader::~DataLoader() {
  stop();
}

void DataLoader::set_epoch(int64_t epoch) {
  next_epoch_ = epoch;
}

int64_t DataLoader::size() const {
  int64_t n = sampler_->size();
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

LoaderStats DataLoader::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

BufferPoolStats DataLoader::buffer_stats() const {
  return pool_.stats();
}

void DataLoader::start_epoch() {
  stop();
  engine_ = std::make_unique<Engine>(*this, next_epoch_);
  sampler_->set_epoch(next_epoch_);
  ++next_epoch_;
}

std::optional<Batch> DataLoader::next() {
  if (!engine_) start_epoch();
  std::optional<Batch> batch = engine_->next();
  if (batch) {
    std::lock_guard lock(stats_mutex_);
    ++stats_.batches;
    stats_.samples += static_cast<int64_t>(batch->indices.size());
    stats_.wait_seconds += batch->wait_seconds;
    stats_.last_wait_seconds = batch->wait_seconds;
    stats_.max_wait_seconds = std::max(stats_.max_wait_seconds, batch->wait_seconds);
  }
  return batch;
}

void DataLoader::stop() {
  engine_.reset();  // the Engine's destructor stops and joins its workers
}

}  // namespace nabla::data
