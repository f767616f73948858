// CifarDataset against records the test writes (CHW planes must come out HWC), its malformed
// files; SyntheticDataset's determinism for a seed; both through the loader's fast path.
#include <filesystem>
#include <fstream>
#include <random>

#include "fuzz/cifar_fuzz_body.h"
#include "fuzz/mutate.h"
#include "nabla/data/cifar.h"
#include "nabla/data/data_loader.h"
#include "nabla/data/error.h"
#include "nabla/data/synthetic.h"
#include "test_util.h"

namespace nabla::data {
namespace {

namespace fs = std::filesystem;

class CifarFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nabla_cifar_" + std::to_string(testing::test_seed()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `records` random records; label bytes drawn below `classes`.
  std::vector<uint8_t> write(const std::string& name, int records, int label_bytes, int classes,
                             uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint8_t> bytes;
    for (int r = 0; r < records; ++r) {
      for (int l = 0; l < label_bytes; ++l)
        bytes.push_back(static_cast<uint8_t>(rng() % (l == 0 && label_bytes == 2 ? 20 : classes)));
      for (int k = 0; k < 3072; ++k) bytes.push_back(static_cast<uint8_t>(rng()));
    }
    write_raw(name, bytes);
    return bytes;
  }
  void write_raw(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream((dir_ / name).string(), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  std::string path(const std::string& name) { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(CifarFiles, Cifar10RecordsComeOutHwcWithTheirLabels) {
  const uint64_t seed = testing::test_seed();
  std::vector<std::vector<uint8_t>> files;
  for (int i = 1; i <= 5; ++i)
    files.push_back(write("data_batch_" + std::to_string(i) + ".bin", 3, 1, 10, seed + i));
  auto ds = CifarDataset::open(dir_.string(), /*train=*/true);
  EXPECT_EQ(ds->size(), 15);
  EXPECT_EQ(ds->num_classes(), 10);
  std::vector<uint8_t> image(3072);
  for (int64_t i = 0; i < 15; ++i) {
    const uint8_t* record = files[static_cast<size_t>(i / 3)].data() + (i % 3) * 3073;
    EXPECT_EQ(ds->load_into(i, image, {.index = i}), record[0]);
    for (int h = 0; h < 32; ++h)
      for (int w = 0; w < 32; ++w)
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(image[static_cast<size_t>((h * 32 + w) * 3 + c)], record[1 + c * 1024 + h * 32 + w])
              << "sample " << i << " h " << h << " w " << w << " c " << c;
  }
  EXPECT_EQ(ds->describe(4), path("data_batch_2.bin") + "[record 1]");
  EXPECT_NABLA_ERROR(CifarDataset::open(dir_.string(), /*train=*/false), "missing CIFAR file",
                     "test_batch.bin");
}

TEST_F(CifarFiles, Cifar100HasCoarseAndFineLabels) {
  auto bytes = write("train.bin", 4, 2, 100, testing::test_seed());
  auto fine = CifarDataset::open(dir_.string(), true, {.variant = CifarVariant::cifar100});
  auto coarse =
      CifarDataset::open(dir_.string(), true, {.variant = CifarVariant::cifar100, .fine_labels = false});
  EXPECT_EQ(fine->num_classes(), 100);
  EXPECT_EQ(coarse->num_classes(), 20);
  std::vector<uint8_t> image(3072);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(fine->load_into(i, image, {}), bytes[static_cast<size_t>(i * 3074 + 1)]);
    EXPECT_EQ(coarse->load_into(i, image, {}), bytes[static_cast<size_t>(i * 3074)]);
    EXPECT_EQ(image[5 * 3 + 2], bytes[static_cast<size_t>(i * 3074 + 2 + 2048 + 5)]) << "blue of pixel 5";
  }
}

TEST_F(CifarFiles, MalformedFilesAreErrors) {
  write_raw("empty.bin", {});
  EXPECT_NABLA_ERROR(CifarDataset({path("empty.bin")}), "is empty", "empty.bin");
  auto bytes = write("short.bin", 2, 1, 10, 1);
  bytes.resize(bytes.size() - 5);
  write_raw("short.bin", bytes);
  EXPECT_NABLA_ERROR(CifarDataset({path("short.bin")}), "3073-byte records", "1 records and 3068 bytes over");
  auto labels = write("label.bin", 2, 1, 10, 2);
  labels[3073] = 10;
  write_raw("label.bin", labels);
  EXPECT_NABLA_ERROR(CifarDataset({path("label.bin")}), "record 1 has label 10, outside [0, 10)");
  EXPECT_NABLA_ERROR(CifarDataset({path("missing.bin")}), "cannot open the file");
  EXPECT_NABLA_ERROR(CifarDataset::open(path("nowhere"), true), "does not exist");
}

TEST_F(CifarFiles, BytesInMemoryParseAsTheFileWould) {
  const auto bytes = write("data.bin", 3, 1, 10, testing::test_seed());
  auto from_file = CifarDataset({path("data.bin")});
  auto parsed = CifarDataset::parse(bytes, "memory");
  ASSERT_EQ(parsed->size(), 3);
  std::vector<uint8_t> a(3072), b(3072);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(parsed->load_into(i, a, {}), from_file.load_into(i, b, {}));
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(parsed->describe(2), "memory[record 2]");
  EXPECT_NABLA_ERROR(CifarDataset::parse(std::span(bytes).first(3000), "memory"), "3073-byte records");
}

TEST(CifarFuzz, FuzzBodyReturnsOrThrowsOnMutatedSeeds) {
  std::mt19937_64 rng(testing::test_seed());
  auto run = [](const std::string& b) {
    return fuzz::cifar_fuzz_one(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  };
  int whole = 0, total = 0;
  for (const auto& [name, seed] : fuzz::cifar_fuzz_seeds()) {
    EXPECT_EQ(run(seed), 2) << name;
    for (int i = 0; i < 300; ++i, ++total) whole += run(fuzz::mutate(seed, i, rng)) == 2 ? 1 : 0;
  }
  EXPECT_LT(whole, total);
}

TEST(SyntheticDataset, IsDeterministicForASeedAndDrawsFromItsPool) {
  const uint64_t seed = testing::test_seed();
  SyntheticOptions options{.size = 1000,
                           .shape = {.height = 8, .width = 6, .channels = 3},
                           .num_classes = 7,
                           .seed = seed,
                           .distinct_images = 5};
  SyntheticDataset a(options), b(options);
  options.seed = seed + 1;
  SyntheticDataset other(options);
  std::vector<uint8_t> x(144), y(144);
  std::set<int64_t> labels, pools;
  int differ = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    int64_t label = a.load_into(i, x, {.index = i});
    EXPECT_EQ(b.load_into(i, y, {.index = i}), label);
    EXPECT_EQ(x, y);
    EXPECT_TRUE(std::equal(x.begin(), x.end(), a.pool_image(a.pool_index(i))));
    labels.insert(label);
    pools.insert(a.pool_index(i));
    other.load_into(i, y, {.index = i});
    differ += x != y;
  }
  EXPECT_EQ(labels.size(), size_t{7}) << "every class drawn";
  EXPECT_EQ(pools.size(), size_t{5}) << "every pool image used";
  EXPECT_GT(differ, 900) << "another seed gives other images";
  int zeros = 0;
  for (int64_t p = 0; p < 5; ++p)
    for (int64_t k = 0; k < 144; ++k) zeros += a.pool_image(p)[k] == 0;
  EXPECT_LT(zeros, 20) << "pool pixels are random, not blank";
}

TEST(SyntheticDataset, FeedsTheLoaderFastPath) {
  auto ds = std::make_shared<SyntheticDataset>(SyntheticOptions{
      .size = 50, .shape = {.height = 4, .width = 4, .channels = 3}, .num_classes = 3, .seed = 5});
  DataLoader loader(ds, {.batch_size = 16, .num_workers = 4});
  int64_t seen = 0;
  for (auto& batch : loader) {
    for (int64_t r = 0; r < batch.input.size(0); ++r) {
      int64_t index = batch.indices[static_cast<size_t>(r)];
      EXPECT_EQ(index, seen + r);
      EXPECT_EQ(batch.target.data_ptr<int64_t>()[r], ds->label(index));
      EXPECT_TRUE(std::equal(batch.input.data_ptr<uint8_t>() + r * 48,
                             batch.input.data_ptr<uint8_t>() + (r + 1) * 48,
                             ds->pool_image(ds->pool_index(index))));
    }
    seen += batch.input.size(0);
  }
  EXPECT_EQ(seen, 50);
}

}  // namespace
}  // namespace nabla::data
