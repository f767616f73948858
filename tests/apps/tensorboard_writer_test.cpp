// TensorBoard event files: CRC-32C against the RFC 3720 check values and a bit-by-bit CRC, TFRecord
// framing and its corruption checks, and the writer's files read back two independent ways: a
// protobuf decoder written here, and read_tfevents.py (its own CRC and decoder in Python; also
// TensorBoard's reader when the package is installed).
#include <gtest/gtest.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "apps_test_util.h"
#include "nabla/apps/train_support/crc32c.h"
#include "nabla/apps/train_support/tensorboard_writer.h"
#include "nabla/apps/train_support/tfrecord.h"
#include "test_util.h"

namespace ts = nabla::train_support;
using nabla::testing::TempDir;
using nabla::testing::test_seed;
using nabla::testing::write_file;

namespace {

// The definition of CRC-32C, one bit at a time: the reference for the table-driven code.
uint32_t crc32c_bitwise(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

// A minimal protobuf reader, independent of event_proto.cpp's writer.
struct Field {
  uint32_t number = 0, wire = 0;
  uint64_t varint = 0;
  std::string bytes;  // fixed32/64 and length-delimited payloads
};

uint64_t read_varint(const std::string& s, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    auto b = static_cast<uint8_t>(s.at(i++));
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

std::vector<Field> parse_message(const std::string& s) {
  std::vector<Field> out;
  size_t i = 0;
  while (i < s.size()) {
    uint64_t key = read_varint(s, i);
    Field f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    if (f.wire == 0) {
      f.varint = read_varint(s, i);
    } else {
      size_t n = f.wire == 1 ? 8 : f.wire == 5 ? 4 : read_varint(s, i);
      f.bytes = s.substr(i, n);
      EXPECT_EQ(f.bytes.size(), n) << "truncated field " << f.number;
      i += n;
    }
    out.push_back(f);
  }
  return out;
}

struct DecodedEvent {
  double wall_time = -1;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;
};

DecodedEvent decode_event(const std::string& s) {
  DecodedEvent e;
  for (const Field& f : parse_message(s)) {
    if (f.number == 1 && f.wire == 1) std::memcpy(&e.wall_time, f.bytes.data(), 8);
    if (f.number == 2 && f.wire == 0) e.step = static_cast<int64_t>(f.varint);
    if (f.number == 3 && f.wire == 2) e.file_version = f.bytes;
    if (f.number == 5 && f.wire == 2) {
      for (const Field& value : parse_message(f.bytes)) {
        std::string tag;
        float simple = std::nanf("");
        for (const Field& vf : parse_message(value.bytes)) {
          if (vf.number == 1 && vf.wire == 2) tag = vf.bytes;
          if (vf.number == 2 && vf.wire == 5) std::memcpy(&simple, vf.bytes.data(), 4);
        }
        e.scalars.emplace_back(tag, simple);
      }
    }
  }
  return e;
}

using Scalars = std::vector<std::pair<std::string, double>>;

// Writes `steps` events of random scalars (tags of varied lengths, a negative and a large step).
std::vector<std::pair<int64_t, Scalars>> write_random_events(ts::TensorBoardWriter& tb, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> value(-50.0, 50.0);
  std::vector<std::pair<int64_t, Scalars>> written;
  for (int64_t step : {int64_t{1}, int64_t{2}, int64_t{300}, int64_t{1} << 40, int64_t{-7}}) {
    Scalars scalars{{"train/loss", value(rng)}, {"train/lr", value(rng)}};
    if (step == 300)
      scalars.emplace_back("val/top1_" + std::string(200, 'x'), value(rng));  // a tag > 127 bytes
    tb.add_scalars(step, scalars);
    written.emplace_back(step, scalars);
  }
  return written;
}

}  // namespace

TEST(Crc32c, MatchesRfc3720CheckValuesAndTheBitwiseDefinition) {
  EXPECT_EQ(ts::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(ts::crc32c(std::string(32, '\0')), 0x8A9136AAu);    // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(ts::crc32c(std::string(32, '\xFF')), 0x62A8AB43u);  // 32 bytes of ones
  std::mt19937_64 rng(test_seed());
  for (size_t n : {1, 7, 64, 1000}) {
    std::string data = random_bytes(rng, n);
    EXPECT_EQ(ts::crc32c(data), crc32c_bitwise(data)) << n << " bytes";
  }
}

TEST(Crc32c, MaskIsInvertedByUnmaskAndChangesTheValue) {
  std::mt19937_64 rng(test_seed());
  for (int i = 0; i < 100; ++i) {
    auto crc = static_cast<uint32_t>(rng());
    EXPECT_EQ(ts::unmask_crc(ts::mask_crc(crc)), crc);
    EXPECT_NE(ts::mask_crc(crc), crc);
  }
  // TensorFlow's Mask: rotate right by 15, add 0xa282ead8 (hand-computed for 0x12345678).
  EXPECT_EQ(ts::mask_crc(0x12345678u), ((0x12345678u >> 15) | (0x12345678u << 17)) + 0xa282ead8u);
}

TEST(TfRecord, FramesRoundTripAndEveryCorruptionIsNamed) {
  TempDir dir;
  std::mt19937_64 rng(test_seed());
  std::vector<std::string> payloads{random_bytes(rng, 0), random_bytes(rng, 5), random_bytes(rng, 3000)};
  std::string file;
  for (const auto& p : payloads) file += ts::frame_tfrecord(p);
  // The layout by hand: 8-byte length, then data at offset 12.
  uint64_t length = 0;
  std::memcpy(&length, file.data() + 16, 8);  // second record (the first has 0 data bytes: 16 in all)
  EXPECT_EQ(length, 5u);
  EXPECT_EQ(file.substr(16 + 12, 5), payloads[1]);
  write_file(dir.file("ok"), file);
  EXPECT_EQ(ts::read_tfrecords(dir.file("ok")), payloads);

  std::string bad = file;
  bad[16 + 12 + 2] ^= 0x01;  // one bit of the second record's data
  write_file(dir.file("data"), bad);
  EXPECT_NABLA_ERROR(ts::read_tfrecords(dir.file("data")), "record 1", "data's CRC");
  bad = file;
  bad[16 + 3] ^= 0x40;  // the second record's length
  write_file(dir.file("len"), bad);
  EXPECT_NABLA_ERROR(ts::read_tfrecords(dir.file("len")), "record 1", "length's CRC");
  write_file(dir.file("cut"), file.substr(0, file.size() - 10));
  EXPECT_NABLA_ERROR(ts::read_tfrecords(dir.file("cut")), "record 2", "truncated");
  write_file(dir.file("stub"), file.substr(0, 16 + 5));
  EXPECT_NABLA_ERROR(ts::read_tfrecords(dir.file("stub")), "record 1", "truncated header");
  EXPECT_NABLA_ERROR(ts::read_tfrecords(dir.file("missing")), "cannot open", "missing");
}

TEST(TensorBoardWriter, EventsDecodeToTheWrittenScalars) {
  TempDir dir;
  ts::TensorBoardWriter tb((dir.path() / "runs" / "a").string());
  EXPECT_NE(std::filesystem::path(tb.path()).filename().string().find("events.out.tfevents."),
            std::string::npos);
  const double before = static_cast<double>(std::time(nullptr)) - 1;
  auto written = write_random_events(tb, test_seed());

  std::vector<std::string> records = ts::read_tfrecords(tb.path());
  ASSERT_EQ(records.size(), written.size() + 1);
  DecodedEvent first = decode_event(records[0]);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  EXPECT_TRUE(first.scalars.empty());
  for (size_t i = 0; i < written.size(); ++i) {
    DecodedEvent e = decode_event(records[i + 1]);
    EXPECT_EQ(e.step, written[i].first);
    EXPECT_GE(e.wall_time, before);
    EXPECT_LE(e.wall_time, static_cast<double>(std::time(nullptr)) + 1);
    ASSERT_EQ(e.scalars.size(), written[i].second.size());
    for (size_t k = 0; k < e.scalars.size(); ++k) {
      EXPECT_EQ(e.scalars[k].first, written[i].second[k].first);
      EXPECT_EQ(e.scalars[k].second, static_cast<float>(written[i].second[k].second));  // stored as float32
    }
  }
  EXPECT_NABLA_ERROR(tb.add_scalar(3, "", 1.0), "tag is empty");
}

TEST(TensorBoardWriter, PythonReaderAgrees) {
  if (std::system("/usr/bin/python3 -c '' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 is missing";
  TempDir dir;
  ts::TensorBoardWriter tb(dir.path().string());
  auto written = write_random_events(tb, test_seed());
  const auto script = nabla::testing::source_file("tests/apps/read_tfevents.py");
  ASSERT_TRUE(std::filesystem::exists(script)) << script;
  auto result =
      nabla::testing::run_command("/usr/bin/python3 '" + script.string() + "' '" + tb.path() + "' 2>&1");
  ASSERT_EQ(result.status, 0) << result.output;
  auto parsed = nlohmann::json::parse(result.output);
  const auto& events = parsed.at("events");
  ASSERT_EQ(events.size(), written.size() + 1);
  EXPECT_EQ(events[0].at("file_version"), "brain.Event:2");
  for (size_t i = 0; i < written.size(); ++i) {
    const auto& e = events[i + 1];
    EXPECT_EQ(e.at("step").get<int64_t>(), written[i].first);
    ASSERT_EQ(e.at("scalars").size(), written[i].second.size());
    for (size_t k = 0; k < written[i].second.size(); ++k) {
      EXPECT_EQ(e.at("scalars")[k][0].get<std::string>(), written[i].second[k].first);
      EXPECT_EQ(e.at("scalars")[k][1].get<double>(),
                static_cast<double>(static_cast<float>(written[i].second[k].second)));
    }
  }
  std::cout << "read_tfevents.py checked every CRC"
            << (parsed.at("tensorboard").get<bool>() ? " and TensorBoard's reader agreed"
                                                     : " (tensorboard not installed)")
            << "\n";
}
