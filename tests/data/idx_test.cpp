// IdxDataset and the IDX reader: files the test writes (raw and gzip) load to exactly the bytes
// written; every malformed file is a DataError naming the file and the problem; the real
// Fashion-MNIST files load with the right counts and the pixel checksum an independent reader
// (Python's gzip + numpy) computes.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "nabla/data/error.h"
#include "nabla/data/idx.h"
#include "test_util.h"

namespace nabla::data {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed, int modulo = 256) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() % modulo);
  return v;
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nabla_idx_" + std::to_string(testing::test_seed()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<uint8_t>& bytes, bool gzip = false) {
    std::string path = (dir_ / name).string();
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    return path;
  }
  std::string good_labels(int n) {
    return write("labels", idx_bytes(0x08, {static_cast<uint32_t>(n)}, random_bytes(n, 1, 10)));
  }

  fs::path dir_;
};

TEST_F(IdxFiles, RawAndGzipFilesLoadToTheBytesWritten) {
  const uint64_t seed = testing::test_seed();
  auto pixels = random_bytes(7 * 5 * 3, seed);
  auto labels = random_bytes(7, seed + 1, 10);
  labels[2] = 9;  // so num_classes is 10 whatever the draw
  for (bool gzip : {false, true}) {
    std::string images_path = write(gzip ? "i.gz" : "i", idx_bytes(0x08, {7, 5, 3}, pixels), gzip);
    std::string labels_path = write(gzip ? "l.gz" : "l", idx_bytes(0x08, {7}, labels), gzip);
    IdxDataset ds(images_path, labels_path);
    EXPECT_EQ(ds.size(), 7);
    EXPECT_EQ(ds.image_shape().height, 5);
    EXPECT_EQ(ds.image_shape().width, 3);
    EXPECT_EQ(ds.image_shape().channels, 1);
    EXPECT_EQ(ds.num_classes(), 10);
    for (int64_t i = 0; i < 7; ++i) {
      std::vector<uint8_t> out(15, 0xAA);
      EXPECT_EQ(ds.load_into(i, out, {.index = i}), labels[static_cast<size_t>(i)]);
      EXPECT_TRUE(std::equal(out.begin(), out.end(), pixels.begin() + i * 15))
          << "image " << i << " gzip " << gzip;
    }
    Example e = ds.get(4);
    EXPECT_EQ(e.input.sizes(), (Shape{5, 3, 1}));
    EXPECT_EQ(e.target.item<int64_t>(), labels[4]);
    EXPECT_EQ(ds.describe(4), images_path + "[4]");
  }
}

TEST_F(IdxFiles, OpenFindsTheStandardNamesAndReportsMissingOnes) {
  auto pixels = random_bytes(2 * 2 * 2, testing::test_seed());
  write("t10k-images-idx3-ubyte.gz", idx_bytes(0x08, {2, 2, 2}, pixels), true);
  write("t10k-labels-idx1-ubyte", idx_bytes(0x08, {2}, {3, 1}));
  auto ds = IdxDataset::open(dir_.string(), /*train=*/false);
  EXPECT_EQ(ds->size(), 2);
  EXPECT_EQ(ds->label(0), 3);
  const std::string dir = dir_.string();
  EXPECT_NABLA_ERROR(IdxDataset::open(dir, /*train=*/true), "no train-images-idx3-ubyte", dir.c_str());
  EXPECT_NABLA_ERROR(IdxDataset::open((dir_ / "nope").string(), true), "does not exist");
}

// A data set whose classes are known (Fashion-MNIST's 10) rejects a label past them, naming the
// sample and the value; without a known count the same file is a 251-class problem.
TEST_F(IdxFiles, LabelOutsideAKnownClassCountIsAnErrorNamingIndexAndValue) {
  const uint64_t seed = testing::test_seed();
  std::string images = write("i", idx_bytes(0x08, {6, 2, 2}, random_bytes(6 * 4, seed)));
  auto labels = random_bytes(6, seed + 1, 10);
  labels[4] = 250;
  std::string labels_path = write("l", idx_bytes(0x08, {6}, labels));
  EXPECT_NABLA_ERROR((void)IdxDataset(images, labels_path, {.num_classes = 10}), "label 250 of sample 4",
                     "outside [0, 10)", labels_path.c_str());
  EXPECT_EQ(IdxDataset(images, labels_path).num_classes(), 251);

  labels[4] = 9;  // in range: the known count is the class count, whatever the labels drawn
  labels_path = write("l", idx_bytes(0x08, {6}, labels));
  IdxDataset ok(images, labels_path, {.num_classes = 10});
  EXPECT_EQ(ok.num_classes(), 10);
  EXPECT_EQ(ok.label(4), 9);
  EXPECT_NABLA_ERROR((void)IdxDataset(images, labels_path, {.num_classes = -1}), "num_classes is -1");
}

// Each malformed images file, paired with good labels, must fail with these fragments.
TEST_F(IdxFiles, MalformedFilesAreErrorsNamingFileAndProblem) {
  const auto payload = random_bytes(3 * 2 * 2, testing::test_seed());
  auto good = idx_bytes(0x08, {3, 2, 2}, payload);
  std::string labels = good_labels(3);
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    bool gzip;
    const char* fragment;
  };
  auto truncated = good;
  truncated.resize(good.size() - 1);
  auto trailing = good;
  trailing.push_back(7);
  auto gz_truncated = [&] {  // a real gzip stream cut in half
    std::string p = write("tmp.gz", good, true);
    std::ifstream f(p, std::ios::binary);
    std::vector<uint8_t> z((std::istreambuf_iterator<char>(f)), {});
    z.resize(z.size() / 2);
    return z;
  }();
  std::vector<uint8_t> gz_corrupt = {0x1f, 0x8b, 8,    0,    0, 0, 0, 0, 0, 3,
                                     0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6};
  std::vector<Case> cases = {
      {"empty", {}, false, "is empty"},
      {"short", {0, 0, 8}, false, "too short for the 4-byte IDX magic"},
      {"magic", {1, 2, 8, 3, 0, 0, 0, 1}, false, "bad IDX magic 01 02 08 03"},
      {"float", idx_bytes(0x0D, {3, 2, 2}, payload), false, "0x0d (float32) is not supported"},
      {"type", idx_bytes(0x42, {3, 2, 2}, payload), false, "0x42 is not an IDX type"},
      {"ndims0", {0, 0, 8, 0}, false, "1 to 4 dimensions, this one claims 0"},
      {"header", {0, 0, 8, 3, 0, 0, 0, 3, 0, 0}, false, "ends inside its header"},
      {"truncated", truncated, false, "promises 12 data bytes, but only 11 follow"},
      {"trailing", trailing, false, "bytes after the 12"},
      {"huge", idx_bytes(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}), false, "exceeds"},
      {"gz_truncated", gz_truncated, false, "truncated"},
      {"gz_corrupt", gz_corrupt, false, "corrupt gzip data"},
      {"gz_truncated_payload", truncated, true, "decompressed IDX data is truncated"},
      {"dims2", idx_bytes(0x08, {3, 4}, random_bytes(12, 3)), false, "must have 3 dimensions"},
      {"count", idx_bytes(0x08, {5, 2, 2}, random_bytes(20, 4)), false, "holds 5 images but the labels file"},
      {"zero", idx_bytes(0x08, {0, 2, 2}, {}), false, "holds no images"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string path = write(c.name, c.bytes, c.gzip);
    if (std::string(c.name) == "count") labels = good_labels(3);
    if (std::string(c.name) == "zero") labels = write("labels0", idx_bytes(0x08, {0}, {}));
    try {
      IdxDataset ds(path, labels);
      ADD_FAILURE() << "expected a DataError";
    } catch (const DataError& e) {
      EXPECT_EQ(e.path(), path);
      EXPECT_NE(std::string(e.what()).find(c.fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  std::string images = write("images", good);
  EXPECT_NABLA_ERROR(IdxDataset(images, write("l2", idx_bytes(0x08, {3, 1}, {1, 2, 3}))),
                     "must have 1 dimension");
  EXPECT_NABLA_ERROR(IdxDataset((dir_ / "missing").string(), labels), "cannot open the file", "missing");
}

// The Debian package's files, read here and by Python independently.
TEST(FashionMnist, RealFilesLoadWithTheRightCountsAndPixelChecksum) {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(root + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  // Checksum: sum of pixel * (position % 251 + 1) over the file, and the sum of labels.
  const std::string script =
      "import gzip, numpy as np\n"
      "for split in ('train', 't10k'):\n"
      "    px = np.frombuffer(gzip.open('" +
      root +
      "/%s-images-idx3-ubyte.gz' % split).read()[16:], np.uint8)\n"
      "    lb = np.frombuffer(gzip.open('" +
      root +
      "/%s-labels-idx1-ubyte.gz' % split).read()[8:], np.uint8)\n"
      "    w = np.arange(px.size, dtype=np.int64) % 251 + 1\n"
      "    print(px.size, lb.size, int((px.astype(np.int64) * w).sum()), int(lb.astype(np.int64).sum()))\n";
  std::string command = "/usr/bin/python3 -c \"" + script + "\"";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  for (bool train : {true, false}) {
    long long py_pixels = 0, py_labels = 0, py_sum = 0, py_label_sum = 0;
    ASSERT_EQ(fscanf(pipe, "%lld %lld %lld %lld", &py_pixels, &py_labels, &py_sum, &py_label_sum), 4);
    auto ds = IdxDataset::open(root, train);
    EXPECT_EQ(ds->size(), train ? 60000 : 10000);
    EXPECT_EQ(ds->image_shape().height, 28);
    EXPECT_EQ(ds->image_shape().width, 28);
    EXPECT_EQ(ds->num_classes(), 10);
    EXPECT_EQ(ds->size() * 784, py_pixels);
    EXPECT_EQ(ds->size(), py_labels);
    long long sum = 0, label_sum = 0, position = 0;
    std::vector<uint8_t> image(784);
    for (int64_t i = 0; i < ds->size(); ++i) {
      label_sum += ds->load_into(i, image, {.index = i});
      for (uint8_t p : image) sum += static_cast<long long>(p) * (position++ % 251 + 1);
    }
    EXPECT_EQ(sum, py_sum) << (train ? "train" : "t10k");
    EXPECT_EQ(label_sum, py_label_sum);
    EXPECT_GT(sum, 0);
  }
  EXPECT_EQ(pclose(pipe), 0);
}

}  // namespace
}  // namespace nabla::data
