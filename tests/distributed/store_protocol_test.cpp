// The TCP store's protocol without sockets (frame splitting, request parsing, the table), its fuzz
// body over seeded mutations of a valid stream, and the server with a hostile connection: random
// bytes, a truncated frame, a huge length, a get without keys. The stranger is dropped; the ranks'
// connections go on.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/sinks/ostream_sink.h>

#include <chrono>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "fuzz/mutate.h"
#include "fuzz/store_fuzz_body.h"
#include "nabla/core/logging.h"
#include "nabla/distributed/detail/socket.h"
#include "nabla/distributed/detail/store_protocol.h"
#include "nabla/distributed/tcp_store.h"
#include "test_util.h"

namespace nabla::distributed {
namespace {

using namespace std::chrono_literals;

using fuzz::store_frame;

std::vector<uint8_t> set_request(const std::string& key, const std::string& value) {
  return encode_store_request({.op = StoreOp::set, .keys = {key}, .value = {value.begin(), value.end()}});
}
std::vector<uint8_t> keys_request(StoreOp op, const std::vector<std::string>& keys) {
  return encode_store_request({.op = op, .keys = keys});
}
std::vector<uint8_t> add_request(const std::string& key, int64_t delta) {
  return encode_store_request({.op = StoreOp::add, .keys = {key}, .delta = delta});
}

TEST(StoreProtocol, SplitterCutsAStreamFedInAnyPiecesIntoItsFrames) {
  std::mt19937_64 rng(nabla::testing::test_seed());
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> stream;
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> p(rng() % 50);
    for (auto& b : p) b = static_cast<uint8_t>(rng());
    auto f = store_frame(p);
    stream.insert(stream.end(), f.begin(), f.end());
    payloads.push_back(std::move(p));
  }
  FrameSplitter splitter;
  std::vector<std::vector<uint8_t>> got;
  for (size_t pos = 0; pos < stream.size();) {
    const size_t n = std::min<size_t>(1 + rng() % 40, stream.size() - pos);
    splitter.append(stream.data() + pos, n);
    pos += n;
    while (auto frame = splitter.next()) got.push_back(std::move(*frame));
  }
  EXPECT_EQ(got, payloads);
  EXPECT_EQ(splitter.buffered(), 0u);
}

TEST(StoreProtocol, AHeaderOverTheLimitIsRefusedBeforeItsBytesArrive) {
  FrameSplitter splitter(1000);
  const uint8_t header[4] = {0xe9, 0x03, 0, 0};  // 1001 bytes
  splitter.append(header, 4);
  try {
    (void)splitter.next();
    FAIL() << "a 1001-byte frame passed a 1000-byte limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("announces 1001 bytes; the limit is 1000"), std::string::npos)
        << e.what();
  }
}

TEST(StoreProtocol, RequestsParseAndMalformedOnesAreNamed) {
  auto set = parse_store_request(set_request("k", "value"));
  EXPECT_EQ(set.op, StoreOp::set);
  EXPECT_EQ(set.keys, std::vector<std::string>{"k"});
  EXPECT_EQ(std::string(set.value.begin(), set.value.end()), "value");
  auto wait = parse_store_request(keys_request(StoreOp::wait, {"a", "b", "c"}));
  EXPECT_EQ(wait.keys, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(parse_store_request(add_request("n", -7)).delta, -7);

  auto expect_error = [](std::vector<uint8_t> frame, const std::string& what) {
    try {
      (void)parse_store_request(frame);
      ADD_FAILURE() << "accepted; expected an error saying " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error({}, "truncated");
  expect_error({9}, "unknown operation 9");
  expect_error(keys_request(StoreOp::get, {}), "a get names 0 keys");
  expect_error(keys_request(StoreOp::get, {"a", "b"}), "a get names 2 keys");
  auto huge_count = keys_request(StoreOp::wait, {"a"});
  huge_count[8] = 0x7f;  // the count's top byte
  expect_error(huge_count, "keys in a frame of");
  auto trailing = set_request("k", "v");
  trailing.push_back(0);
  expect_error(trailing, "trailing bytes");
  auto negative = set_request("k", "v");
  negative[8] = 0xff;  // the key length's top byte: negative
  expect_error(negative, "negative length");
}

TEST(StoreProtocol, TableAnswersWaitsWhenTheirLastKeyIsSetAndRefusesBadAdds) {
  StoreTable table;
  EXPECT_TRUE(table.apply(2, parse_store_request(keys_request(StoreOp::wait, {"a", "b"}))).empty());
  EXPECT_TRUE(table.apply(3, parse_store_request(keys_request(StoreOp::get, {"b"}))).empty());
  EXPECT_EQ(table.parked(), 2u);
  auto replies = table.apply(1, parse_store_request(set_request("a", "1")));
  ASSERT_EQ(replies.size(), 1u);  // only the setter's acknowledgement
  replies = table.apply(1, parse_store_request(set_request("b", "xyz")));
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[1].client, 2);
  EXPECT_EQ(replies[2].client, 3);
  net::Reader value(replies[2].payload);
  EXPECT_EQ(value.string(), "xyz");
  EXPECT_EQ(table.parked(), 0u);

  replies = table.apply(1, parse_store_request(add_request("a", 41)));
  net::Reader sum(replies.at(0).payload);
  EXPECT_EQ(sum.i64(), 42);
  EXPECT_THROW(table.apply(1, parse_store_request(add_request("b", 1))), Error);  // "xyz"
  (void)table.apply(1, parse_store_request(add_request("big", INT64_MAX)));
  EXPECT_THROW(table.apply(1, parse_store_request(add_request("big", 1))), Error);

  (void)table.apply(4, parse_store_request(keys_request(StoreOp::wait, {"never"})));
  table.forget(4);
  EXPECT_EQ(table.parked(), 0u);
}

TEST(StoreProtocol, OneClientCannotMakeTheTableHoldUnboundedKeysOrWaits) {
  std::vector<uint8_t> many = keys_request(StoreOp::wait, {});
  const int64_t count = kMaxStoreKeys + 1;
  for (int i = 0; i < 8; ++i) many[1 + i] = static_cast<uint8_t>(static_cast<uint64_t>(count) >> (8 * i));
  many.resize(many.size() + 8 * static_cast<size_t>(count), 0);  // that many empty keys
  EXPECT_NABLA_ERROR(parse_store_request(many), "names 65537 keys; the limit is 65536");
  StoreTable table;
  for (size_t i = 0; i < kMaxParkedPerClient; ++i) {
    (void)table.apply(7, parse_store_request(keys_request(StoreOp::wait, {"k" + std::to_string(i)})));
  }
  EXPECT_NABLA_ERROR(table.apply(7, parse_store_request(keys_request(StoreOp::wait, {"one more"}))),
                     "already has 1024 requests waiting");
  EXPECT_TRUE(
      table.apply(8, parse_store_request(keys_request(StoreOp::wait, {"other"}))).empty());  // others may
}

TEST(StoreProtocol, FuzzBodyReturnsOrThrowsOnMutatedStreams) {
  const std::string valid = fuzz::store_fuzz_seed();
  auto run = [](const std::string& bytes) {
    return fuzz::store_fuzz_one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  };
  EXPECT_EQ(run(valid), 6);
  std::mt19937_64 rng(nabla::testing::test_seed());
  int whole = 0;
  for (int i = 0; i < 2000; ++i) {
    SCOPED_TRACE(::testing::Message() << "mutation " << i);
    whole += run(fuzz::mutate(valid, i, rng)) == 6 ? 1 : 0;
  }
  EXPECT_LT(whole, 2000);  // the mutations did reach the checks
}

// A raw connection to the store port, as a stranger would open.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) : socket_(net::connect("127.0.0.1", port, 10s)) {}
  void send(const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(::send(socket_.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // True when the server closed the connection within 10 s (after any replies it sent first).
  bool closed_by_server() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    uint8_t buffer[256];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{socket_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      ssize_t n = ::recv(socket_.fd(), buffer, sizeof(buffer), 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  net::Socket socket_;
};

// Copies what the nabla logger writes while it lives (added before the server thread starts and
// removed after it stops, so no sink changes while the thread logs).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    logger().sinks().push_back(sink_);
  }
  ~LogCapture() { std::erase(logger().sinks(), sink_); }
  std::string text() {
    logger().flush();
    return text_.str();
  }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST(StoreProtocol, ServerDropsAHostileConnectionAndTheJobGoesOn) {
  LogCapture log;
  std::optional<TcpStore> server_storage;
  server_storage.emplace("127.0.0.1", 0,
                         TcpStoreOptions{.is_server = true, .timeout = 10s, .connect_timeout = 10s});
  TcpStore& server = *server_storage;
  TcpStore rank("127.0.0.1", server.port(), {.is_server = false, .timeout = 10s, .connect_timeout = 10s});
  rank.set("before", std::string("1"));
  std::mt19937_64 rng(nabla::testing::test_seed());

  std::vector<uint8_t> garbage(300);
  for (auto& b : garbage) b = static_cast<uint8_t>(rng());
  garbage[0] = 40;  // a small length, so the garbage is parsed (not refused as an oversized frame)
  garbage[1] = garbage[2] = garbage[3] = 0;
  garbage[4] = 0xee;  // no such operation
  auto zero_keys = store_frame(keys_request(StoreOp::get, {}));
  const std::vector<std::vector<uint8_t>> attacks = {
      garbage,
      {0xff, 0xff, 0xff, 0xff, 1, 2, 3},  // a 4 GiB frame announced
      zero_keys,
  };
  for (size_t i = 0; i < attacks.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "attack " << i);
    RawConnection stranger(server.port());
    stranger.send(attacks[i]);
    EXPECT_TRUE(stranger.closed_by_server());
    rank.set("after", std::to_string(i));
    EXPECT_EQ(rank.get_string("after"), std::to_string(i));
  }
  {
    // A truncated frame and a hang-up: nothing to answer, nothing left behind.
    RawConnection stranger(server.port());
    auto f = store_frame(set_request("half", "written"));
    f.resize(f.size() - 3);
    stranger.send(f);
  }
  EXPECT_EQ(rank.add("counter", 2), 2);
  EXPECT_FALSE(rank.check("half"));
  EXPECT_EQ(rank.get_string("before"), "1");
  // Each stranger is named in the warning that drops it, with what it sent.
  const std::string text = log.text();
  EXPECT_NE(text.find("dropping the connection from 127.0.0.1:"), std::string::npos) << text;
  EXPECT_NE(text.find("unknown operation 238"), std::string::npos) << text;
  EXPECT_NE(text.find("announces 4294967295 bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("a get names 0 keys"), std::string::npos) << text;
  server_storage.reset();  // the server thread stops before the capture goes
}

}  // namespace
}  // namespace nabla::distributed
