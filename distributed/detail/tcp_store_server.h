// Internal. The thread that serves a TcpStore on rank 0.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "nabla/distributed/detail/socket.h"

namespace nabla::distributed {

enum class StoreOp : uint8_t { set = 1, get = 2, add = 3, wait = 4, check = 5 };

class TcpStoreServer {
 public:
  explicit TcpStoreServer(uint16_t port);  // binds now, so a port in use fails in the constructor
  ~TcpStoreServer();                       // stops the thread and closes every connection
  uint16_t port() const { return port_; }

 private:
  struct Client {
    net::Socket socket;
    std::vector<uint8_t> input;  // bytes received but not yet a whole frame
  };
  // A get or wait whose keys are not all set yet; answered when the last one arrives.
  struct Parked {
    int fd;
    StoreOp op;
    std::vector<std::string> keys;
  };

  void serve();
  void accept_client();
  bool read_client(Client& client);  // false when the client has gone
  void handle(int fd, const std::vector<uint8_t>& frame);
  bool ready(const std::vector<std::string>& keys) const;
  void answer(int fd, StoreOp op, const std::vector<std::string>& keys);
  void release_parked();
  void reply(int fd, const std::vector<uint8_t>& payload);

  net::Socket listener_;
  uint16_t port_ = 0;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes to stop poll()
  std::map<int, Client> clients_;
  std::map<std::string, std::vector<uint8_t>> data_;
  std::vector<Parked> parked_;
  std::thread thread_;
};

}  // namespace nabla::distributed
