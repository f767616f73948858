// Internal. The thread that serves a TcpStore on rank 0: it moves bytes between its connections and
// the protocol (store_protocol.h), which parses and answers them.
//
// Anyone who can reach the port can connect, so a connection that sends something malformed, a
// frame over the size limit, or does not take a reply within 10 s is named in a warning and
// dropped; the other ranks' connections go on (delayed at most those 10 s, once per such
// connection: replies are sent from the serving thread, not queued).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nabla/distributed/detail/socket.h"
#include "nabla/distributed/detail/store_protocol.h"

namespace nabla::distributed {

class TcpStoreServer {
 public:
  explicit TcpStoreServer(uint16_t port);  // binds now, so a port in use fails in the constructor
  ~TcpStoreServer();                       // stops the thread and closes every connection
  uint16_t port() const { return port_; }

 private:
  static constexpr std::chrono::seconds kReplyTimeout{10};
  struct Client {
    net::Socket socket;
    std::string peer;  // "address:port", for the warning that drops it
    FrameSplitter input;
  };

  void serve();
  void accept_client();
  bool read_client(int fd, Client& client);  // false when the client has gone or is dropped
  bool send_replies(const std::vector<StoreTable::Reply>& replies, int reader);  // false: drop `reader`
  void drop(int fd);

  net::Socket listener_;
  uint16_t port_ = 0;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes to stop poll()
  std::map<int, Client> clients_;
  std::set<int> dropped_;  // clients a reply to failed, removed after the current read
  StoreTable table_;
  std::thread thread_;
};

}  // namespace nabla::distributed
