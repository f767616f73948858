// `nabla-bench data`: the input pipeline's speed on an ImageNet-layout JPEG folder, measured the
// way ../shared/bench/torch_loader.py measures PyTorch on the same files (make them with
// tools/make_jpeg_set.py):
//   1. one thread, files already in memory: decode + RandomResizedCrop(224) + flip, per image
//      (with DCT-domain scaling, and without it for comparison);
//   2. N threads, same work, files in memory: the decode rate the cores can reach;
//   3. the DataLoader with N workers over ImageFolder (read, decode, crop, flip, batch into the
//      pinned pool), batch 256: images per second and the time the consumer waited per step
//      (the stall a training loop would see), optionally with a simulated step time;
//   4. with --decode gpu (or both): the loader deferring its JPEGs to nvJPEG, through a
//      DevicePrefetcher (bf16 channels_last batches on the GPU): images per second delivered on the
//      device with N workers that only read files and parse headers (Note [GPU decode]).
// Prints a table and, with --json, writes the same numbers as JSON.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "nabla/core/cuda/runtime.h"
#include "nabla/data/data_loader.h"
#include "nabla/data/device_prefetcher.h"
#include "nabla/data/image/image_folder.h"
#include "nabla/data/image/pipeline.h"
#include "nabla_bench/commands.h"

namespace nabla::bench {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct DataBenchOptions {
  std::string root;
  int64_t size = 224;
  std::vector<int> threads = {1, 4, 8, 16};
  int64_t batch_size = 256;
  int64_t repeat = 8;  // torch_loader.py's DataLoader runs over len(data) * 8 samples
  int prefetch = 2;
  std::string pin_memory = "auto";  // auto: pinned when a GPU is present
  double step_ms = 0;               // simulated training step per batch (0: drain as fast as possible)
  std::string cache_path;
  std::string json_path;
  std::string decode = "cpu";  // cpu, gpu or both: which loaders to measure
};

// The same folder `times` over, each pass with its own crops (the index differs), like
// torch_loader.py's `data[i % len(data)]`.
class RepeatedDataset : public data::ImageDataset {
 public:
  RepeatedDataset(std::shared_ptr<data::ImageFolder> base, int64_t times)
      : base_(std::move(base)), times_(times) {}
  int64_t size() const override { return base_->size() * times_; }
  data::ImageShape image_shape() const override { return base_->image_shape(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  int64_t load_into(int64_t index, std::span<uint8_t> pixels, const data::SampleContext& context) override {
    return base_->load_into(index % base_->size(), pixels, context);
  }
  int64_t load_deferred(int64_t index, data::DeferredImage& image, std::span<uint8_t> pixels,
                        const data::SampleContext& context) override {
    return base_->load_deferred(index % base_->size(), image, pixels, context);
  }
  std::string describe(int64_t index) const override { return base_->describe(index % base_->size()); }

 private:
  std::shared_ptr<data::ImageFolder> base_;
  int64_t times_;
};

// Decode + crop + flip of every file in memory, `passes` times, spread over `threads` threads
// (the calling thread when 1, after 20 untimed images as torch_loader.py does); images per second.
double decode_rate(const std::vector<std::vector<uint8_t>>& files, const data::ImageTransform& transform,
                   const data::DecodeOptions& decode, int threads, int64_t passes) {
  auto total = static_cast<int64_t>(files.size()) * passes;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    std::vector<uint8_t> slot(static_cast<size_t>(transform.size * transform.size * 3));
    for (int64_t i = next++; i < total; i = next++) {
      data::SampleRandom random(data::SampleContext{.seed = 0, .index = i});
      data::decode_transformed(files[static_cast<size_t>(i % static_cast<int64_t>(files.size()))], transform,
                               decode, random, slot);
    }
  };
  next = total - std::min<int64_t>(20, total);  // warm-up: the last 20 images
  work();
  next = 0;
  auto start = Clock::now();
  if (threads == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  return static_cast<double>(total) / seconds_since(start);
}

struct LoaderResult {
  double img_s = 0, mean_wait_ms = 0, max_wait_ms = 0, wait_fraction = 0;
  int64_t batches = 0;
};

LoaderResult loader_rate(const std::shared_ptr<data::ImageDataset>& dataset, int workers, bool pinned,
                         const DataBenchOptions& options) {
  data::DataLoader loader(dataset, {.batch_size = options.batch_size,
                                    .shuffle = false,  // as torch_loader.py
                                    .drop_last = false,
                                    .num_workers = workers,
                                    .prefetch = options.prefetch,
                                    .pin_memory = pinned,
                                    .seed = 0});
  loader.start_epoch();
  auto first = loader.next();  // like torch_loader.py: the first batch (worker start-up) is not timed
  LoaderResult result;
  int64_t images = 0;
  double waited = 0;
  auto start = Clock::now();
  while (auto batch = loader.next()) {
    images += batch->input.size(0);
    waited += batch->wait_seconds;
    result.max_wait_ms = std::max(result.max_wait_ms, batch->wait_seconds * 1e3);
    ++result.batches;
    if (options.step_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(options.step_ms));
  }
  double elapsed = seconds_since(start);
  result.img_s = static_cast<double>(images) / elapsed;
  result.mean_wait_ms = result.batches ? waited * 1e3 / static_cast<double>(result.batches) : 0;
  result.wait_fraction = waited / elapsed;
  return result;
}

void write_json(const DataBenchOptions& options, const nlohmann::json& report) {
  if (options.json_path.empty()) return;
  std::ofstream(options.json_path) << report.dump(2) << "\n";
  std::printf("\nwrote %s\n", options.json_path.c_str());
}

// The loader deferring its JPEGs to the GPU, through a DevicePrefetcher: images per second handed
// out on the device (the last batch waited for), and how long the consumer waited per batch.
struct GpuLoaderResult {
  LoaderResult rate;
  data::PrefetchStats stats;
};

GpuLoaderResult gpu_loader_rate(const std::shared_ptr<data::ImageDataset>& dataset, int workers,
                                const DataBenchOptions& options) {
  data::DataLoader loader(dataset, {.batch_size = options.batch_size,
                                    .num_workers = workers,
                                    .prefetch = options.prefetch,
                                    .pin_memory = true,
                                    .defer_decode = true});
  data::DevicePrefetcher prefetcher(
      loader, {.normalize = {.dtype = kBFloat16, .memory_format = MemoryFormat::ChannelsLast}});
  prefetcher.start_epoch();
  auto first = prefetcher.next();  // worker start-up and nvJPEG's first allocations: not timed
  nabla::cuda::synchronize();
  GpuLoaderResult result;
  int64_t images = 0;
  auto start = Clock::now();
  while (auto batch = prefetcher.next()) {
    images += batch->input.size(0);
    result.rate.max_wait_ms = std::max(result.rate.max_wait_ms, batch->wait_seconds * 1e3);
    ++result.rate.batches;
    if (options.step_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(options.step_ms));
  }
  nabla::cuda::synchronize();  // the last decode has finished
  const double elapsed = seconds_since(start);
  result.stats = prefetcher.stats();
  const double waited = result.stats.wait_seconds - (first ? first->wait_seconds : 0.0);
  result.rate.img_s = static_cast<double>(images) / elapsed;
  result.rate.mean_wait_ms =
      result.rate.batches ? waited * 1e3 / static_cast<double>(result.rate.batches) : 0;
  result.rate.wait_fraction = waited / elapsed;
  return result;
}

void run(const DataBenchOptions& options) {
  NABLA_CHECK(options.decode == "cpu" || options.decode == "gpu" || options.decode == "both",
              "nabla-bench data: --decode must be cpu, gpu or both, got '{}'", options.decode);
  NABLA_CHECK(options.decode == "cpu" || cuda::is_available(),
              "nabla-bench data: --decode {} needs a CUDA device, and none is available", options.decode);
  bool pinned = options.pin_memory == "on" || (options.pin_memory == "auto" && cuda::is_available());
  data::ImageFolderOptions folder_options{.decode = {}, .index = {.cache_path = options.cache_path}};
  auto folder = std::make_shared<data::ImageFolder>(
      options.root, data::imagenet_train_transform(options.size), folder_options);
  std::vector<std::vector<uint8_t>> files(static_cast<size_t>(folder->size()));
  size_t bytes = 0;
  for (int64_t i = 0; i < folder->size(); ++i) {
    data::read_file(folder->path(i), files[static_cast<size_t>(i)]);
    bytes += files[static_cast<size_t>(i)].size();
  }
  std::printf("nabla-bench data: %zu JPEGs (avg %.1f kB) in %s, %d classes; RandomResizedCrop(%ld) + flip\n",
              files.size(), static_cast<double>(bytes) / 1024.0 / static_cast<double>(files.size()),
              options.root.c_str(), static_cast<int>(folder->num_classes()), static_cast<long>(options.size));
  nlohmann::json report = {{"root", options.root},
                           {"jpegs", files.size()},
                           {"size", options.size},
                           {"hardware_threads", std::thread::hardware_concurrency()}};

  auto transform = data::imagenet_train_transform(options.size);
  std::printf("\n%-44s %8s %10s\n", "decode + crop + flip, files in memory", "threads", "img/s");
  for (bool dct : {true, false}) {
    double rate = decode_rate(files, transform, {.dct_scaling = dct}, 1, 2);
    std::printf("%-44s %8d %10.1f\n", dct ? "  DCT-scaled decode" : "  full-size decode (no DCT scaling)", 1,
                rate);
    report["single_thread"].push_back({{"dct_scaling", dct}, {"threads", 1}, {"img_s", rate}});
  }
  for (int threads : options.threads) {
    double rate = decode_rate(files, transform, {.dct_scaling = true}, threads, options.repeat);
    std::printf("%-44s %8d %10.1f\n", "  DCT-scaled decode", threads, rate);
    report["threads"].push_back({{"threads", threads}, {"img_s", rate}});
  }

  auto repeated = std::make_shared<RepeatedDataset>(folder, options.repeat);
  if (options.decode != "cpu") {
    std::printf(
        "\nGPU decode (nvJPEG) through DevicePrefetcher: batch %ld, bf16 channels_last, step %.1f ms\n",
        static_cast<long>(options.batch_size), options.step_ms);
    std::printf("%8s %10s %9s %14s %13s %11s %8s %8s  %s\n", "workers", "img/s", "batches", "wait/step ms",
                "max wait ms", "wait share", "gpu", "cpu", "decoder");
    for (int workers : options.threads) {
      const GpuLoaderResult g = gpu_loader_rate(repeated, workers, options);
      std::printf("%8d %10.1f %9ld %14.2f %13.2f %10.1f%% %8ld %8ld  %s\n", workers, g.rate.img_s,
                  static_cast<long>(g.rate.batches), g.rate.mean_wait_ms, g.rate.max_wait_ms,
                  100.0 * g.rate.wait_fraction, static_cast<long>(g.stats.gpu_images),
                  static_cast<long>(g.stats.cpu_images), g.stats.decode_backend.c_str());
      report["gpu_loader"].push_back({{"workers", workers},
                                      {"img_s", g.rate.img_s},
                                      {"batches", g.rate.batches},
                                      {"mean_wait_ms", g.rate.mean_wait_ms},
                                      {"max_wait_ms", g.rate.max_wait_ms},
                                      {"gpu_images", g.stats.gpu_images},
                                      {"cpu_images", g.stats.cpu_images},
                                      {"fallback_images", g.stats.fallback_images},
                                      {"decoder", g.stats.decode_backend},
                                      {"batch_size", options.batch_size}});
    }
  }
  if (options.decode == "gpu") {
    write_json(options, report);
    return;
  }
  std::printf("\nDataLoader over ImageFolder: batch %ld, prefetch %d, %s memory, step %.1f ms\n",
              static_cast<long>(options.batch_size), options.prefetch, pinned ? "pinned" : "pageable",
              options.step_ms);
  std::printf("%8s %10s %9s %14s %13s %11s\n", "workers", "img/s", "batches", "wait/step ms", "max wait ms",
              "wait share");
  for (int workers : options.threads) {
    auto r = loader_rate(repeated, workers, pinned, options);
    std::printf("%8d %10.1f %9ld %14.2f %13.2f %10.1f%%\n", workers, r.img_s, static_cast<long>(r.batches),
                r.mean_wait_ms, r.max_wait_ms, 100.0 * r.wait_fraction);
    report["loader"].push_back({{"workers", workers},
                                {"img_s", r.img_s},
                                {"batches", r.batches},
                                {"mean_wait_ms", r.mean_wait_ms},
                                {"max_wait_ms", r.max_wait_ms},
                                {"wait_fraction", r.wait_fraction},
                                {"pin_memory", pinned},
                                {"batch_size", options.batch_size},
                                {"step_ms", options.step_ms}});
  }
  write_json(options, report);
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto options = std::make_shared<DataBenchOptions>();
  CLI::App* cmd =
      app.add_subcommand("data", "JPEG decode + RandomResizedCrop + flip rate, and loader stall time");
  cmd->add_option("--root", options->root,
                  "ImageNet-layout folder, e.g. OUT/train from tools/make_jpeg_set.py")
      ->required();
  cmd->add_option("--size", options->size, "output side of RandomResizedCrop")->capture_default_str();
  cmd->add_option("--threads", options->threads, "thread / worker counts, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--batch-size", options->batch_size)->capture_default_str();
  cmd->add_option("--repeat", options->repeat, "passes over the folder per measurement")
      ->capture_default_str();
  cmd->add_option("--prefetch", options->prefetch, "loader batches in flight")->capture_default_str();
  cmd->add_option("--pin-memory", options->pin_memory, "on, off or auto (on when a GPU is present)")
      ->check(CLI::IsMember({"on", "off", "auto"}))
      ->capture_default_str();
  cmd->add_option("--step-ms", options->step_ms, "simulated training step per batch, in ms")
      ->capture_default_str();
  cmd->add_option("--index-cache", options->cache_path, "ImageFolder index cache file (outside --root)");
  cmd->add_option("--json", options->json_path, "also write the results as JSON to this file");
  cmd->add_option("--decode", options->decode,
                  "cpu: the CPU loader; gpu: workers read files and nvJPEG decodes on the GPU; both")
      ->capture_default_str();
  cmd->callback([options] { run(*options); });
}

}  // namespace nabla::bench
