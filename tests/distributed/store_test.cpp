// TcpStore: values, blocking gets, atomic adds and waits across threads and connections, and the
// clear errors for a port in use, a wrong address, a store that is not there and timeouts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "nabla/distributed/tcp_store.h"
#include "test_util.h"

namespace nabla::distributed {
namespace {

using namespace std::chrono_literals;

TcpStoreOptions server_options() {
  return {.is_server = true, .timeout = 10s, .connect_timeout = 10s};
}
TcpStoreOptions client_options() {
  return {.is_server = false, .timeout = 10s, .connect_timeout = 10s};
}

TEST(TcpStore, SetThenGetFromAnotherConnection) {
  TcpStore server("127.0.0.1", 0, server_options());
  TcpStore client("127.0.0.1", server.port(), client_options());
  std::mt19937 rng(static_cast<uint32_t>(nabla::testing::test_seed()));
  Bytes value(1000);
  for (auto& b : value) b = static_cast<uint8_t>(rng());
  server.set("blob", value);
  EXPECT_EQ(client.get("blob"), value);
  client.set("blob", std::string("overwritten"));
  EXPECT_EQ(server.get_string("blob"), "overwritten");
  EXPECT_TRUE(client.check("blob"));
  EXPECT_FALSE(client.check("absent"));
}

TEST(TcpStore, GetWaitsUntilAnotherRankSets) {
  TcpStore server("127.0.0.1", 0, server_options());
  std::thread setter([port = server.port()] {
    TcpStore late("127.0.0.1", port, client_options());
    std::this_thread::sleep_for(150ms);
    late.set("id", std::string("nccl-unique-id"));
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server.get_string("id"), "nccl-unique-id");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  setter.join();
}

TEST(TcpStore, ConcurrentAddsFromManyClientsAreAtomic) {
  TcpStore server("127.0.0.1", 0, server_options());
  constexpr int kThreads = 6, kAdds = 50;
  std::vector<std::thread> threads;
  std::atomic<int64_t> expected{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      TcpStore client("127.0.0.1", server.port(), client_options());
      for (int i = 0; i < kAdds; ++i) {
        client.add("counter", t + 1);
        expected += t + 1;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(server.add("counter", 0), expected.load());
  EXPECT_EQ(expected.load(), kAdds * kThreads * (kThreads + 1) / 2);
}

TEST(TcpStore, WaitReturnsOnlyWhenEveryKeyIsSet) {
  TcpStore server("127.0.0.1", 0, server_options());
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    TcpStore client("127.0.0.1", server.port(), client_options());
    client.wait({"a", "b", "c"});
    done = true;
  });
  server.set("a", std::string("1"));
  server.set("b", std::string("2"));
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(done.load());
  server.set("c", std::string("3"));
  waiter.join();
  EXPECT_TRUE(done.load());
}

TEST(TcpStore, TimeoutNamesTheKeyAndTheStoreStaysUsable) {
  TcpStore server("127.0.0.1", 0, server_options());
  TcpStore client("127.0.0.1", server.port(), client_options());
  auto start = std::chrono::steady_clock::now();
  EXPECT_NABLA_ERROR(client.get("never_set", 200ms), "never_set");
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 190ms);
  EXPECT_LT(waited, 5s);
  try {
    client.wait({"x", "y"}, 100ms);
    ADD_FAILURE() << "wait should time out";
  } catch (const StoreTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'x', 'y'"), std::string::npos) << e.what();
  }
  // The timed-out connection was dropped; the next call reconnects and works.
  server.set("later", std::string("ok"));
  EXPECT_EQ(client.get_string("later"), "ok");
}

TEST(TcpStore, PortInUseIsAClearError) {
  TcpStore server("127.0.0.1", 0, server_options());
  EXPECT_NABLA_ERROR(TcpStore("127.0.0.1", server.port(), server_options()), "already in use");
}

TEST(TcpStore, UnresolvableAddressIsAClearError) {
  EXPECT_NABLA_ERROR(TcpStore("no-such-host.invalid", 29500, client_options()), "MASTER_ADDR");
}

TEST(TcpStore, NoServerFailsAfterTheConnectTimeout) {
  uint16_t port;
  {
    TcpStore probe("127.0.0.1", 0, server_options());
    port = probe.port();
  }  // closed again: nobody listens there now
  auto start = std::chrono::steady_clock::now();
  EXPECT_NABLA_ERROR(TcpStore("127.0.0.1", port, {.connect_timeout = 300ms}), "could not connect");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
}

TEST(TcpStore, ClientMayStartBeforeTheServer) {
  uint16_t port;
  {
    TcpStore probe("127.0.0.1", 0, server_options());
    port = probe.port();
  }
  std::thread server_thread([port] {
    std::this_thread::sleep_for(200ms);
    TcpStore server("127.0.0.1", port, server_options());
    server.wait({"client_was_here"});
  });
  TcpStore client("127.0.0.1", port, client_options());  // retries until the server is up
  client.set("client_was_here", std::string("yes"));
  server_thread.join();
}

TEST(PrefixStore, KeysDoNotClash) {
  TcpStore server("127.0.0.1", 0, server_options());
  PrefixStore a("group_a", server), b("group_b", server);
  a.set("k", std::string("from a"));
  b.set("k", std::string("from b"));
  EXPECT_EQ(a.get_string("k"), "from a");
  EXPECT_EQ(b.get_string("k"), "from b");
  EXPECT_EQ(server.get_string("group_a/k"), "from a");
}

}  // namespace
}  // namespace nabla::distributed
