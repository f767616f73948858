// ImageFolder: torchvision's class and sample order, the index cache, errors naming the sample,
// determinism for a seed, and the fused decode + crop path against torchvision.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "data/image_test_util.h"
#include "nabla/data/data_loader.h"
#include "nabla/data/error.h"
#include "nabla/data/image/image_folder.h"
#include "nabla/data/image/pipeline.h"
#include "test_util.h"

namespace nabla::data {
namespace {

namespace fs = std::filesystem;
using nabla::testing::byte_diff;
using nabla::testing::read_bytes;
using nabla::testing::write_bytes;

class ImageFolderTest : public ::testing::Test {
 protected:
  // PIL-made fixtures, once per build (Python start-up costs seconds; see ImageFixtures).
  void SetUp() override {
    NABLA_REQUIRE_TORCHVISION();
    if (!fixtures_) {
      fixtures_ = std::make_unique<nabla::testing::ImageFixtures>(
          std::hash<std::string>{}("ImageFolderTest") % 100000);
    }
    jpeg_ = read_bytes(*fixtures_ / "rgb.jpg");
  }
  static void TearDownTestSuite() { fixtures_.reset(); }
  // A tree with the cases torchvision's order depends on: unsorted classes, mixed-case
  // extensions, nested directories ("a-c" sorts before "a/b"), and files that are not images.
  std::string make_tree() {
    std::string root = dir_ / "root";
    for (const char* file :
         {"zebra/b.JPEG", "zebra/a.jpg", "zebra/Z.jpeg", "apple/sub/x.JPEG", "apple/sub-2/y.jpg",
          "apple/sub/deeper/w.png", "apple/top.jpg", "mango/only.JPEG"}) {
      write_bytes(root + "/" + file,
                  std::string(file).ends_with("png") ? read_bytes(*fixtures_ / "image.png") : jpeg_);
    }
    write_bytes(root + "/zebra/notes.txt", {'h', 'i'});
    write_bytes(root + "/apple/sub/README", {'x'});
    write_bytes(root + "/stray_file.jpg", jpeg_);  // a file at the root is no class
    return root;
  }
  nabla::testing::ScratchDir dir_;
  static std::unique_ptr<nabla::testing::ImageFixtures> fixtures_;
  std::vector<uint8_t> jpeg_;
};

std::unique_ptr<nabla::testing::ImageFixtures> ImageFolderTest::fixtures_;

TEST_F(ImageFolderTest, ClassesAndSamplesAreInTorchvisionOrder) {
  std::string root = make_tree();
  nabla::testing::run_image_reference("folder " + root + " " + (dir_ / "expected.txt"));
  std::ifstream expected(dir_ / "expected.txt");
  std::vector<std::string> classes, samples;
  for (std::string line; std::getline(expected, line);) {
    (line.starts_with("class ") ? classes : samples)
        .push_back(line.starts_with("class ") ? line.substr(6) : line);
  }
  auto index = index_image_folder(root);
  EXPECT_EQ(index.classes, classes);
  std::vector<std::string> ours;
  for (size_t i = 0; i < index.files.size(); ++i)
    ours.push_back(std::to_string(index.labels[i]) + " " + index.files[i]);
  EXPECT_EQ(ours, samples);
  EXPECT_EQ(ours.size(), 8u);
}

TEST_F(ImageFolderTest, CacheIsReusedUntilADirectoryChanges) {
  std::string root = make_tree();
  FolderIndexOptions options{.cache_path = dir_ / "index.cache"};
  auto first = index_image_folder(root, options);
  EXPECT_FALSE(first.from_cache);
  ASSERT_TRUE(fs::exists(options.cache_path));
  auto second = index_image_folder(root, options);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.classes, first.classes);
  EXPECT_EQ(second.files, first.files);
  EXPECT_EQ(second.labels, first.labels);
  // A new file in a nested directory changes that directory's mtime: rescan, and see the file.
  write_bytes(root + "/apple/sub/deeper/new.jpg", jpeg_);
  auto third = index_image_folder(root, options);
  EXPECT_FALSE(third.from_cache);
  EXPECT_EQ(third.files.size(), first.files.size() + 1);
  // A cache for other extensions is not reused.
  options.extensions = {".jpg", ".jpeg"};
  EXPECT_FALSE(index_image_folder(root, options).from_cache);
  // A corrupt cache is ignored, not trusted.
  write_bytes(options.cache_path, {'g', 'a', 'r', 'b', 'a', 'g', 'e'});
  EXPECT_FALSE(index_image_folder(root, options).from_cache);
}

TEST_F(ImageFolderTest, MissingEmptyOrClasslessFoldersAreClearErrors) {
  EXPECT_NABLA_ERROR(ImageFolder(dir_ / "nope", imagenet_train_transform()), "does not exist", "nope");
  write_bytes(dir_ / "file", jpeg_);
  EXPECT_NABLA_ERROR(ImageFolder(dir_ / "file", imagenet_train_transform()), "is not a directory");
  write_bytes(dir_ / "flat/a.jpg", jpeg_);
  EXPECT_NABLA_ERROR(ImageFolder(dir_ / "flat", imagenet_train_transform()), "no class directories");
  write_bytes(dir_ / "sparse/full/a.jpg", jpeg_);
  write_bytes(dir_ / "sparse/empty/readme.txt", {'x'});
  EXPECT_NABLA_ERROR(ImageFolder(dir_ / "sparse", imagenet_train_transform()), "no image files", "empty");
}

TEST_F(ImageFolderTest, BadFilesRaiseDataErrorWithIndexAndPath) {
  std::string root = dir_ / "bad";
  write_bytes(root + "/c/0_good.JPEG", jpeg_);
  write_bytes(root + "/c/1_empty.JPEG", {});
  auto truncated = jpeg_;
  truncated.resize(truncated.size() / 3);
  write_bytes(root + "/c/2_truncated.JPEG", truncated);
  write_bytes(root + "/c/3_png.JPEG", read_bytes(*fixtures_ / "image.png"));
  ImageFolder folder(root, imagenet_train_transform(32), {.decode = {.png = PngPolicy::reject}, .index = {}});
  std::vector<uint8_t> slot(size_t{32} * 32 * 3);
  EXPECT_EQ(folder.load_into(0, slot, {.index = 0}), 0);
  const std::vector<std::pair<int64_t, std::string>> cases = {
      {1, "empty file"}, {2, "truncated JPEG"}, {3, "PNG image, not a JPEG"}};
  for (const auto& [index, problem] : cases) {
    try {
      folder.load_into(index, slot, {.index = index});
      ADD_FAILURE() << "sample " << index << " should fail";
    } catch (const DataError& e) {
      EXPECT_EQ(e.index(), index);
      EXPECT_EQ(e.path(), folder.path(index));
      EXPECT_NE(std::string(e.what()).find(problem), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(folder.path(index)), std::string::npos) << e.what();
    }
  }
  // Decoding the PNG instead, as the user may choose.
  ImageFolder lenient(root, imagenet_train_transform(32),
                      {.decode = {.png = PngPolicy::decode}, .index = {}});
  EXPECT_EQ(lenient.load_into(3, slot, {.index = 3}), 0);
}

// A damaged but decodable JPEG trains by default and is counted once however often it is read;
// CorruptDataPolicy::error (nabla-train --strict-jpeg) makes it a DataError, so OnBadSample applies.
TEST_F(ImageFolderTest, DamagedJpegIsCountedOnceOrIsABadSampleWhenStrict) {
  std::string root = dir_ / "damaged";
  write_bytes(root + "/c/0_good.JPEG", jpeg_);
  write_bytes(root + "/c/1_damaged.JPEG", nabla::testing::with_bad_huffman_code(jpeg_));
  write_bytes(root + "/c/2_harmless.JPEG", nabla::testing::with_extraneous_bytes(jpeg_));
  std::vector<uint8_t> slot(size_t{32} * 32 * 3);
  ImageFolder folder(root, imagenet_val_transform(32, 36));
  EXPECT_EQ(folder.corrupt_files(), 0);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(folder.load_into(i, slot, {.epoch = epoch, .index = i}), 0);
  }
  EXPECT_EQ(folder.corrupt_files(), 1);

  ImageFolder strict(root, imagenet_val_transform(32, 36),
                     {.decode = {.corrupt_data = CorruptDataPolicy::error}, .index = {}});
  EXPECT_EQ(strict.load_into(0, slot, {.index = 0}), 0);
  EXPECT_EQ(strict.load_into(2, slot, {.index = 2}), 0);
  try {
    strict.load_into(1, slot, {.index = 1});
    ADD_FAILURE() << "the damaged file should fail under CorruptDataPolicy::error";
  } catch (const DataError& e) {
    EXPECT_EQ(e.index(), 1);
    EXPECT_NE(std::string(e.what()).find("corrupt JPEG data"), std::string::npos) << e.what();
  }
  EXPECT_EQ(strict.corrupt_files(), 0);
}

TEST_F(ImageFolderTest, SamplesAreReproducibleForASeedAndVaryWithTheEpoch) {
  std::string root = make_tree();
  ImageFolder folder(root, imagenet_train_transform(48));
  EXPECT_EQ(folder.image_shape().bytes(), 48 * 48 * 3);
  EXPECT_EQ(folder.num_classes(), 3);
  std::vector<uint8_t> a(size_t{48} * 48 * 3), b(a.size()), c(a.size());
  uint64_t seed = nabla::testing::test_seed();
  EXPECT_EQ(folder.load_into(5, a, {.seed = seed, .epoch = 1, .index = 5, .worker = 0}), folder.label(5));
  folder.load_into(5, b, {.seed = seed, .epoch = 1, .index = 5, .worker = 3});
  folder.load_into(5, c, {.seed = seed, .epoch = 2, .index = 5, .worker = 0});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  auto example = folder.get(5, {.seed = seed, .epoch = 1, .index = 5});
  EXPECT_EQ(example.input.sizes(), (Shape{48, 48, 3}));
  EXPECT_EQ(
      std::vector<uint8_t>(example.input.data_ptr<uint8_t>(), example.input.data_ptr<uint8_t>() + a.size()),
      a);
}

// The fused path (decode + crop + resize + flip into the slot) against torchvision applied to
// PIL's decode of the same JPEG: exact geometry at full-size decode, and close to torchvision's
// antialiased resize when the DCT scale shrinks the decode.
TEST_F(ImageFolderTest, FusedDecodeAndCropMatchesTorchvision) {
  auto pil = read_bytes(*fixtures_ / "rgb.rgb");  // (173, 259, 3)
  auto header = read_image_header(jpeg_);
  // Both decode modes' jobs (full size first) go to torchvision in one Python process: its
  // start-up costs seconds.
  constexpr size_t kCrops = 12;  // per decode mode
  std::vector<std::string> jobs;
  std::vector<std::vector<uint8_t>> ours;
  std::vector<bool> flips;
  for (bool dct : {false, true}) {
    ImageTransform transform = imagenet_train_transform(40);
    DecodeOptions options{.dct_scaling = dct};
    bool scaled_any = false;
    for (int64_t index = 0; index < int64_t{kCrops}; ++index) {
      SampleContext context{.seed = nabla::testing::test_seed(), .index = index};
      SampleRandom plan_random(context), decode_random(context);
      ImagePlan plan = plan_image(header, transform, options, plan_random);
      scaled_any = scaled_any || plan.scale.value() < 1;
      std::vector<uint8_t> out(size_t{40} * 40 * 3);
      decode_transformed(jpeg_, transform, options, decode_random, out);
      ours.push_back(out);
      flips.push_back(plan.flip);
      jobs.push_back(
          fmt::format(R"("kind": "resized_crop", "top": {}, "left": {}, "height": {}, "width": {}, )"
                      R"("size": 40, "antialias": {})",
                      plan.crop.top, plan.crop.left, plan.crop.height, plan.crop.width, dct));
    }
    EXPECT_EQ(scaled_any, dct);
  }
  auto expected = nabla::testing::torchvision_outputs(pil, 173, 259, jobs);
  ASSERT_EQ(expected.size(), jobs.size());
  for (bool dct : {false, true}) {
    for (size_t k = dct ? kCrops : 0; k < (dct ? 2 * kCrops : kCrops); ++k) {
      if (flips[k]) {  // RandomHorizontalFlip on the reference
        for (int64_t y = 0; y < 40; ++y)
          for (int64_t x = 0; x < 20; ++x)
            for (int64_t c = 0; c < 3; ++c)
              std::swap(expected[k][(y * 40 + x) * 3 + c], expected[k][(y * 40 + 39 - x) * 3 + c]);
      }
      auto diff = byte_diff(ours[k], expected[k]);
      if (!dct) {
        EXPECT_LE(diff.max, 2) << jobs[k];
        EXPECT_LT(diff.mean, 0.05) << jobs[k];
      } else {
        EXPECT_LT(diff.mean, 2.0) << jobs[k];  // a different low-pass filter, same geometry
      }
    }
  }
}

// The evaluation transform through ImageFolder (Resize(44) + CenterCrop(40)) against
// torchvision on PIL's decode: exact geometry at full size, close to the antialiased resize when
// the decode is DCT-scaled (259x173 -> 65x44 allows 3/8 -> 98x65, then bilinear).
TEST_F(ImageFolderTest, ValidationTransformMatchesTorchvisionResizeAndCenterCrop) {
  std::string root = dir_ / "val";
  write_bytes(root + "/c/a.JPEG", jpeg_);
  auto pil = read_bytes(*fixtures_ / "rgb.rgb");  // (173, 259, 3)
  // Both references from one Python process (its start-up costs seconds): [0] plain, [1] antialiased.
  const auto expected = nabla::testing::torchvision_outputs(
      pil, 173, 259,
      {R"("kind": "resize_center_crop", "resize": 44, "size": 40, "antialias": false)",
       R"("kind": "resize_center_crop", "resize": 44, "size": 40, "antialias": true)"});
  ASSERT_EQ(expected.size(), 2u);
  for (bool dct : {false, true}) {
    ImageFolder folder(root, imagenet_val_transform(40, 44), {.decode = {.dct_scaling = dct}, .index = {}});
    std::vector<uint8_t> a(size_t{40} * 40 * 3), b(a.size());
    folder.load_into(0, a, {.seed = 1, .index = 0});
    folder.load_into(0, b, {.seed = 2, .epoch = 5, .index = 0});
    EXPECT_EQ(a, b);  // no randomness in evaluation
    auto diff = byte_diff(a, expected[dct ? 1 : 0]);
    if (!dct) {
      EXPECT_LE(diff.max, 2);
      EXPECT_LT(diff.mean, 0.05);
    } else {
      EXPECT_LT(diff.mean, 2.0);
    }
  }
}

// ImageFolder through the DataLoader's fast path (workers write into the batch buffer): every
// row equals a direct load_into with the same (seed, epoch, index), in sampler order, whatever
// the number of worker threads.
TEST_F(ImageFolderTest, LoaderBatchesEqualDirectLoadsForTheSameSeed) {
  auto folder = std::make_shared<ImageFolder>(make_tree(), imagenet_train_transform(24));
  const size_t image_bytes = size_t{24} * 24 * 3;
  uint64_t seed = nabla::testing::test_seed();
  for (int workers : {1, 3}) {
    DataLoader loader(folder, {.batch_size = 3, .shuffle = true, .num_workers = workers, .seed = seed});
    loader.set_epoch(4);
    int64_t rows = 0;
    for (auto& batch : loader) {
      ASSERT_EQ(batch.input.sizes(), (Shape{int64_t(batch.indices.size()), 24, 24, 3}));
      for (size_t r = 0; r < batch.indices.size(); ++r, ++rows) {
        int64_t index = batch.indices[r];
        std::vector<uint8_t> expected(image_bytes);
        EXPECT_EQ(folder->load_into(index, expected, {.seed = seed, .epoch = 4, .index = index}),
                  batch.target.data_ptr<int64_t>()[r]);
        const uint8_t* row = batch.input.data_ptr<uint8_t>() + r * image_bytes;
        EXPECT_TRUE(std::equal(expected.begin(), expected.end(), row)) << "row " << r << ", index " << index;
      }
    }
    EXPECT_EQ(rows, folder->size());
  }
}

// Note [GPU decode]: with defer_decode, workers leave sequential JPEGs (baseline colour and
// grayscale) to the GPU with the crop and flip the CPU path draws, and decode the rest (progressive,
// CMYK, PNG) as the CPU path does. A deferred image decoded at full size on the CPU and resampled
// by its plan is the CPU path's image with DCT scaling off, byte for byte; the loader's
// deferred batches carry the plans and the CPU rows.
TEST_F(ImageFolderTest, DeferredLoadsLeaveSequentialJpegsToTheGpuWithTheCpuPathsPlan) {
  std::string root = dir_ / "deferred";
  const std::vector<std::pair<std::string, bool>> files = {{"a/rgb.jpg", true},
                                                           {"a/gray.jpg", true},
                                                           {"b/progressive.jpg", false},
                                                           {"b/cmyk.jpg", false},
                                                           {"c/image.png", false}};
  for (const auto& [file, gpu] : files) {
    write_bytes(root + "/" + file, read_bytes(*fixtures_ / fs::path(file).filename().string()));
    EXPECT_EQ(read_image_header(read_bytes(root + "/" + file)).gpu_decodable, gpu) << file;
  }
  const int64_t size = 32;
  const size_t image_bytes = size_t{32} * 32 * 3;
  auto folder =
      std::make_shared<ImageFolder>(root, imagenet_train_transform(size),
                                    ImageFolderOptions{.decode = {.dct_scaling = false}, .index = {}});
  const uint64_t seed = nabla::testing::test_seed();
  for (int64_t index = 0; index < folder->size(); ++index) {
    for (int64_t epoch : {0, 3}) {
      const SampleContext context{.seed = seed, .epoch = epoch, .index = index};
      std::vector<uint8_t> expected(image_bytes), got(image_bytes, 0);
      const int64_t label = folder->load_into(index, expected, context);
      DeferredImage image;
      EXPECT_EQ(folder->load_deferred(index, image, got, context), label);
      const bool gpu =
          std::find(files.begin(), files.end(),
                    std::pair{fs::relative(folder->path(index), root).string(), true}) != files.end();
      ASSERT_EQ(image.on_gpu, gpu) << folder->path(index);
      if (image.on_gpu) {
        EXPECT_EQ(image.bytes, read_bytes(folder->path(index)));
        const DecodedImage full = decode_image(image.bytes);
        EXPECT_EQ(full.width, image.width);
        EXPECT_EQ(full.height, image.height);
        resample_bilinear(full.pixels, full.height, full.width, 3, image.map, got, size, size, image.flip);
      }
      EXPECT_EQ(got, expected) << folder->path(index) << ", epoch " << epoch;
    }
  }
  // Through the loader: each batch carries one entry per row; the CPU rows are written, the GPU
  // rows' plans are the direct ones.
  DataLoader loader(folder,
                    {.batch_size = 2, .shuffle = true, .num_workers = 2, .defer_decode = true, .seed = seed});
  int64_t rows = 0;
  for (auto& batch : loader) {
    ASSERT_NE(batch.deferred, nullptr);
    ASSERT_EQ(batch.deferred->size(), batch.indices.size());
    for (size_t r = 0; r < batch.indices.size(); ++r, ++rows) {
      const int64_t index = batch.indices[r];
      const SampleContext context{.seed = seed, .epoch = 0, .index = index};
      DeferredImage direct;
      std::vector<uint8_t> pixels(image_bytes);
      folder->load_deferred(index, direct, pixels, context);
      const DeferredImage& row = (*batch.deferred)[r];
      ASSERT_EQ(row.on_gpu, direct.on_gpu);
      if (row.on_gpu) {
        EXPECT_EQ(row.flip, direct.flip);
        EXPECT_EQ(row.map.x.origin, direct.map.x.origin);
        EXPECT_EQ(row.map.y.step, direct.map.y.step);
      } else {
        const uint8_t* got = batch.input.data_ptr<uint8_t>() + r * image_bytes;
        EXPECT_TRUE(std::equal(pixels.begin(), pixels.end(), got)) << "row " << r;
      }
    }
  }
  EXPECT_EQ(rows, folder->size());
  // Only an ImageDataset can defer.
  EXPECT_THROW(DataLoader(folder, {.batch_size = 2, .defer_decode = true, .collate = stack_collate}),
               nabla::Error);
}

// A resumed run (set_epoch after a restart) gets the deferred batches an uninterrupted run gets in
// that epoch: the same rows, crops and flips, and the same CPU-decoded rows (issue 47's exact
// resume of data order, on the GPU decode path).
TEST_F(ImageFolderTest, DeferredBatchesOfAResumedEpochAreThoseOfTheUninterruptedRun) {
  std::string root = dir_ / "deferred_resume";
  for (const char* file :
       {"a/rgb.jpg", "a/gray.jpg", "b/progressive.jpg", "b/cmyk.jpg", "c/rgb.jpg", "c/gray.jpg"}) {
    write_bytes(root + "/" + file, read_bytes(*fixtures_ / fs::path(file).filename().string()));
  }
  auto folder = std::make_shared<ImageFolder>(
      root, imagenet_train_transform(24), ImageFolderOptions{.decode = {.dct_scaling = false}, .index = {}});
  const uint64_t seed = nabla::testing::test_seed();
  const DataLoaderOptions options{
      .batch_size = 2, .shuffle = true, .num_workers = 2, .defer_decode = true, .seed = seed};
  struct Row {
    int64_t index;
    bool on_gpu, flip;
    double x_origin, y_step;
    std::vector<uint8_t> pixels;  // a CPU-decoded row's
    bool operator==(const Row&) const = default;
  };
  const auto epoch_rows = [&](DataLoader& loader) {
    std::vector<Row> rows;
    for (auto& batch : loader) {
      const size_t bytes = static_cast<size_t>(batch.input.numel() / batch.input.size(0));
      for (size_t r = 0; r < batch.indices.size(); ++r) {
        const DeferredImage& d = (*batch.deferred)[r];
        Row row{batch.indices[r],
                d.on_gpu,
                d.flip,
                static_cast<double>(d.map.x.origin),
                static_cast<double>(d.map.y.step),
                {}};
        if (!d.on_gpu) {
          const uint8_t* p = batch.input.data_ptr<uint8_t>() + r * bytes;
          row.pixels.assign(p, p + bytes);
        }
        rows.push_back(std::move(row));
      }
    }
    return rows;
  };
  DataLoader straight(folder, options);
  std::vector<Row> third;
  for (int64_t epoch = 0; epoch < 3; ++epoch) third = epoch_rows(straight);  // epochs 0, 1, 2
  DataLoader resumed(folder, options);
  resumed.set_epoch(2);
  const std::vector<Row> again = epoch_rows(resumed);
  ASSERT_EQ(again.size(), static_cast<size_t>(folder->size()));
  EXPECT_TRUE(again == third) << "the resumed epoch differs from the uninterrupted run's";
  // And the order really depends on the epoch (the comparison is not of two fixed orders).
  DataLoader other(folder, options);
  other.set_epoch(1);
  const std::vector<Row> first = epoch_rows(other);
  EXPECT_FALSE(first == third);
}

}  // namespace
}  // namespace nabla::data
