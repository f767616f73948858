// Public header. TcpStore: the Store that rank 0 hosts on MASTER_ADDR:MASTER_PORT.
//
//   auto store = nabla::distributed::TcpStore::from_env();          // RANK 0 hosts, others connect
//   store->set("nccl_id", id_bytes);  auto id = store->get("nccl_id");
//
// The server is one thread polling every client socket; a get() or wait() for a missing key
// parks the request there until some set() or add() provides it. Clients connect with retries,
// so ranks may start in any order within the connect timeout.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "nabla/distributed/store.h"

namespace nabla::distributed {

struct TcpStoreOptions {
  bool is_server = false;  // true on the rank that hosts the store (rank 0)
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;           // get/wait default
  std::chrono::milliseconds connect_timeout = std::chrono::minutes(5);  // rank 0 may start late
};

class TcpStoreServer;
namespace net {
class Socket;
}

class TcpStore : public Store {
 public:
  // port 0 with is_server picks a free port; read it back with port().
  TcpStore(std::string host, uint16_t port, TcpStoreOptions options = {});
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  // Where distributed_env() says (MASTER_ADDR, MASTER_PORT, the rank from nabla-run, torchrun or
  // mpirun); rank 0 hosts.
  static std::unique_ptr<TcpStore> from_env(TcpStoreOptions options = {});

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::string& key) override;
  using Store::get;
  using Store::set;
  using Store::wait;

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }

 private:
  // Sends a request and waits for its reply until `deadline`; on timeout the connection is
  // dropped (the reply may still come) and StoreTimeoutError names `what`.
  std::vector<uint8_t> request(const std::vector<uint8_t>& payload, std::chrono::milliseconds timeout,
                               const std::string& what);

  std::string host_;
  uint16_t port_;
  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex mutex_;                     // one request in flight per client
  std::unique_ptr<net::Socket> socket_;  // the connection to the server (detail/socket.h)
};

}  // namespace nabla::distributed
