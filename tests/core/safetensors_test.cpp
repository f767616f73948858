// safetensors: round trips of every dtype and layout, the exact byte layout the specification
// prescribes (https://github.com/huggingface/safetensors, README "Format"), atomic writes, and
// one test per kind of malformed file the reader must reject.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;
namespace fs = std::filesystem;

// A fresh scratch directory per test case, removed afterwards.
class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("nabla_st_{}_{}", info->name(), ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void write(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary);
    out << bytes;
  }
  // A file image: the header length (u64, little-endian), the header, the data.
  static std::string image(const std::string& header, const std::string& data) {
    uint64_t n = header.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &n, 8);
    return out + header + data;
  }
  bool tmp_files_left() const {
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
    }
    return false;
  }

  fs::path dir_;
};

Tensor bool_input(const Shape& sizes, uint64_t seed) {
  return random_input(sizes, seed).relu().to(kBool);
}

TEST_F(Safetensors, RoundTripsEveryDType) {
  const uint64_t seed = test_seed();
  std::map<std::string, Tensor> tensors;
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    tensors[std::string(dtype_name(t))] = random_input({3, 5}, seed + static_cast<int>(t), t);
  }
  tensors["int64"] = (random_input({4, 2}, seed + 10) * 1000.0).to(kInt64);
  tensors["int32"] = (random_input({7}, seed + 11) * 1000.0).to(kInt32);
  tensors["uint8"] = (random_input({2, 3}, seed + 12).abs() * 100.0).to(kUInt8);
  tensors["bool"] = bool_input({9}, seed + 13);
  tensors["scalar"] = random_input({}, seed + 14);
  tensors["empty"] = Tensor::empty({0, 4}, {.dtype = kFloat32});
  save_safetensors(path("all.safetensors"), tensors);
  auto loaded = load_safetensors(path("all.safetensors"));
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const Tensor& l = loaded.tensors.at(name);
    EXPECT_EQ(l.dtype(), t.dtype());
    EXPECT_EQ(l.sizes(), t.sizes());
    EXPECT_TRUE(all_close(l, t, 0, 0));
  }
  EXPECT_FALSE(tmp_files_left());
}

TEST_F(Safetensors, StoresNonContiguousAndChannelsLastContiguously) {
  const uint64_t seed = test_seed();
  Tensor base = random_input({4, 6}, seed, kFloat32);
  Tensor image4d = random_input({2, 3, 4, 5}, seed + 1, kFloat32);
  std::map<std::string, Tensor> tensors{
      {"transposed", base.transpose(0, 1)},
      {"strided", base.slice(1, 1, 6, 2)},
      {"reversed_rows", base.select(0, 2)},
      {"channels_last", image4d.contiguous(MemoryFormat::ChannelsLast)},
  };
  ASSERT_FALSE(tensors["transposed"].is_contiguous());
  ASSERT_FALSE(tensors["channels_last"].is_contiguous());
  // The file must hold row-major data: parse it independently of the writer's layout logic.
  std::string bytes = serialize_safetensors(tensors);
  auto parsed = parse_safetensors(std::as_bytes(std::span(bytes.data(), bytes.size())));
  save_safetensors(path("views.safetensors"), tensors);
  auto loaded = load_safetensors(path("views.safetensors"));
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(loaded.tensors.at(name).is_contiguous());
    EXPECT_EQ(loaded.tensors.at(name).sizes(), t.sizes());
    EXPECT_TRUE(all_close(loaded.tensors.at(name), t.contiguous(), 0, 0));
    EXPECT_TRUE(all_close(parsed.tensors.at(name), t.contiguous(), 0, 0));
  }
}

TEST_F(Safetensors, RoundTripsMetadata) {
  std::map<std::string, std::string> metadata{
      {"format", "pt"}, {"epoch", "12"}, {"note", "unicode: \xce\xb1\xce\xb2"}};
  save_safetensors(path("m.safetensors"), {{"w", random_input({2}, test_seed())}}, metadata);
  EXPECT_EQ(load_safetensors(path("m.safetensors")).metadata, metadata);
}

// The specification: u64 little-endian N, N bytes of JSON, then the data; offsets relative to
// the data section. We pad the header with spaces to keep the data 8-byte aligned, as the
// reference writer does (trailing whitespace is allowed by the spec).
TEST_F(Safetensors, WritesTheLayoutTheSpecificationPrescribes) {
  float a[2] = {1.5f, -2.25f};
  int64_t b = 7;
  Tensor ta = Tensor::empty({2}, {.dtype = kFloat32});
  std::memcpy(ta.data_ptr(), a, sizeof(a));
  Tensor tb = Tensor::empty({}, {.dtype = kInt64});
  std::memcpy(tb.data_ptr(), &b, sizeof(b));
  std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string data(16, '\0');
  std::memcpy(data.data(), a, 8);
  std::memcpy(data.data() + 8, &b, 8);
  const std::string expected = image(json, data);
  ASSERT_EQ(expected.size() % 8, 0u);

  save_safetensors(path("known.safetensors"), {{"b", tb}, {"a", ta}}, {{"format", "pt"}});
  EXPECT_EQ(read(path("known.safetensors")), expected);
  EXPECT_EQ(serialize_safetensors({{"a", ta}, {"b", tb}}, {{"format", "pt"}}), expected);
}

// What PyTorch's safetensors (the Rust writer) produces for
//   save_file({"weight": torch.tensor([[1., -2.], [.5, 65504.]], dtype=torch.float16),
//              "bias": torch.tensor([3., 4.])}, path)
// : tensors ordered by alignment (F32 before F16), no metadata, header padded with spaces.
TEST_F(Safetensors, ReadsAFileAsPyTorchWritesIt) {
  std::string json = R"({"bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("weight":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint16_t half_bits[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF};  // 1, -2, 0.5, 65504
  const float bias[2] = {3.f, 4.f};
  std::string data(16, '\0');
  std::memcpy(data.data(), bias, 8);
  std::memcpy(data.data() + 8, half_bits, 8);
  write(path("torch.safetensors"), image(json, data));
  auto f = load_safetensors(path("torch.safetensors"));
  EXPECT_TRUE(f.metadata.empty());
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors["weight"].dtype(), kFloat16);
  EXPECT_EQ(f.tensors["weight"].to(kFloat64).to_vector<double>(), (std::vector<double>{1, -2, 0.5, 65504}));
  EXPECT_EQ(f.tensors["weight"].sizes(), (Shape{2, 2}));
  EXPECT_EQ(f.tensors["bias"].to_vector<float>(), (std::vector<float>{3, 4}));
}

// ---- atomic writes --------------------------------------------------------------------------------

TEST_F(Safetensors, WriteIntoAMissingDirectoryNamesPathAndReason) {
  std::string p = path("missing/dir/x.safetensors");
  EXPECT_NABLA_ERROR(save_safetensors(p, {{"w", random_input({2}, test_seed())}}),
                     "missing/dir/x.safetensors", "No such file or directory");
  EXPECT_FALSE(fs::exists(p));
}

// A write that fails halfway (the file-size limit stops it) leaves the old checkpoint intact and
// no temporary file behind.
TEST_F(Safetensors, FailedWriteKeepsTheOldFile) {
  Tensor old_value = random_input({4}, test_seed(), kFloat32);
  save_safetensors(path("ckpt.safetensors"), {{"w", old_value}});
  const std::string before = read(path("ckpt.safetensors"));

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);  // make write() fail with EFBIG instead of a signal
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    save_safetensors(path("ckpt.safetensors"), {{"w", random_input({100000}, test_seed() + 1, kFloat32)}});
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("File too large"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ckpt.safetensors"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(read(path("ckpt.safetensors")), before);
  EXPECT_TRUE(all_close(load_safetensors(path("ckpt.safetensors")).tensors.at("w"), old_value, 0, 0));
  EXPECT_FALSE(tmp_files_left());
}

// The rename is the last step; if it fails (the target is a non-empty directory) the temporary
// file is removed.
TEST_F(Safetensors, FailedRenameLeavesNoTemporaryFile) {
  fs::create_directories(path("target/sub"));
  EXPECT_NABLA_ERROR(save_safetensors(path("target"), {{"w", random_input({3}, test_seed())}}),
                     "cannot rename", "target");
  EXPECT_TRUE(fs::is_directory(path("target/sub")));
  EXPECT_FALSE(tmp_files_left());
}

TEST_F(Safetensors, RefusesBadArgumentsBeforeTouchingTheFile) {
  save_safetensors(path("a.safetensors"), {{"w", random_input({2}, test_seed())}});
  const std::string before = read(path("a.safetensors"));
  EXPECT_NABLA_ERROR(save_safetensors(path("a.safetensors"), {{"w", Tensor()}}), "\"w\" is undefined");
  EXPECT_NABLA_ERROR(save_safetensors(path("a.safetensors"), {{"__metadata__", random_input({2}, 1)}}),
                     "reserved");
  EXPECT_EQ(read(path("a.safetensors")), before);
  EXPECT_FALSE(tmp_files_left());
}

// ---- malformed files: each is rejected with the file name and the problem ------------------------

class SafetensorsAbuse : public Safetensors {
 protected:
  // A header with one entry "t" and `data_bytes` bytes of data.
  std::string entry_file(const std::string& entry, size_t data_bytes = 8) {
    return image(R"({"t":)" + entry + "}", std::string(data_bytes, '\x01'));
  }
  void expect_rejected(const std::string& bytes, const char* fragment) {
    write(path("bad.safetensors"), bytes);
    EXPECT_NABLA_ERROR(load_safetensors(path("bad.safetensors")), "bad.safetensors", fragment);
    EXPECT_NABLA_ERROR(parse_safetensors(std::as_bytes(std::span(bytes.data(), bytes.size())), "mem"), "mem",
                       fragment);
  }
};

TEST_F(SafetensorsAbuse, FileShorterThanEightBytes) {
  expect_rejected("abcde", "too short (5 bytes)");
}

TEST_F(SafetensorsAbuse, HeaderLengthBeyondTheFile) {
  std::string bytes = image("{}", "");
  bytes[0] = 100;
  expect_rejected(bytes, "beyond the end of the file");
}

TEST_F(SafetensorsAbuse, HeaderLengthOverTheLimit) {
  std::string bytes = image("{}", "");
  uint64_t huge = 1ull << 40;  // never allocated
  std::memcpy(bytes.data(), &huge, 8);
  expect_rejected(bytes, "over the 100 MB limit");
}

TEST_F(SafetensorsAbuse, HeaderNotJson) {
  expect_rejected(image("{\"t\": [", ""), "not valid JSON");
}

TEST_F(SafetensorsAbuse, HeaderNotAnObject) {
  expect_rejected(image("[1, 2]", ""), "not a JSON object");
}

TEST_F(SafetensorsAbuse, EntryNotAnObject) {
  expect_rejected(entry_file("3", 0), "tensor \"t\" is not an object");
}

TEST_F(SafetensorsAbuse, EntryLacksAField) {
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[2]})"), "lacks the field \"data_offsets\"");
}

TEST_F(SafetensorsAbuse, UnknownDTypeIsNamedWithTheAllowedOnes) {
  expect_rejected(entry_file(R"({"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]})"),
                  "unknown dtype \"F8_E4M3\" (allowed: F32, F64, F16, BF16, I64, I32, U8, BOOL)");
}

TEST_F(SafetensorsAbuse, NegativeShape) {
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
                  "non-negative integers");
}

TEST_F(SafetensorsAbuse, NonIntegerShape) {
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"),
                  "non-negative integers");
  expect_rejected(entry_file(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"),
                  "non-negative integers");
}

TEST_F(SafetensorsAbuse, ShapeWhoseSizeOverflowsIsRejectedBeforeAllocating) {
  expect_rejected(entry_file(R"({"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
                  "whose size in bytes overflows");
}

TEST_F(SafetensorsAbuse, OffsetsOutOfRange) {
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 4), "out of range");
}

TEST_F(SafetensorsAbuse, OffsetsReversed) {
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), "are reversed");
}

TEST_F(SafetensorsAbuse, OffsetsNotAPair) {
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), "must be [begin, end]");
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), "must be [begin, end]");
}

TEST_F(SafetensorsAbuse, OffsetsOverlapAnotherTensor) {
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_rejected(image(header, std::string(12, '\0')),
                  "tensor \"b\" (data_offsets [4, 12]) overlaps tensor \"a\"");
}

// JSON parsers keep one of two equal keys (nlohmann the last, others the first), so a file
// with a repeated tensor name would load different weights in different readers. Each of these
// files is valid once the repeated key is dropped.
TEST_F(SafetensorsAbuse, RepeatedTensorNameIsRejectedAndNamed) {
  std::string header = R"({"w":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                       R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  expect_rejected(image(header, std::string(4, '\x01')), "the key \"w\" twice");
}

TEST_F(SafetensorsAbuse, RepeatedFieldInsideAnEntryIsRejected) {
  expect_rejected(entry_file(R"({"dtype":"I32","dtype":"F32","shape":[2],"data_offsets":[0,8]})"),
                  "the key \"dtype\" twice");
}

TEST_F(SafetensorsAbuse, EqualKeysInDifferentObjectsAreAccepted) {
  std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  std::string bytes = image(header, std::string(8, '\x01'));
  auto file = parse_safetensors(std::as_bytes(std::span(bytes.data(), bytes.size())), "mem");
  EXPECT_EQ(file.tensors.size(), 2u);
}

TEST_F(SafetensorsAbuse, SpanDisagreesWithShape) {
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
                  "span 8 bytes but shape [3] of F32 needs 12");
}

TEST_F(SafetensorsAbuse, DataNotFullyCovered) {
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), "belong to no tensor");
  expect_rejected(entry_file(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), "the tensors cover 4");
}

TEST_F(SafetensorsAbuse, MetadataValueNotAString) {
  expect_rejected(image(R"({"__metadata__":{"epoch":3}})", ""), "metadata value \"epoch\" is not a string");
  expect_rejected(image(R"({"__metadata__":[1]})", ""), "\"__metadata__\" is not an object");
}

TEST_F(SafetensorsAbuse, MissingFileNamesPathAndReason) {
  EXPECT_NABLA_ERROR(load_safetensors(path("nope.safetensors")), "nope.safetensors",
                     "No such file or directory");
}

}  // namespace
}  // namespace nabla
