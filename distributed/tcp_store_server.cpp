#include "nabla/distributed/detail/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "nabla/core/error.h"
#include "nabla/core/logging.h"

namespace nabla::distributed {

TcpStoreServer::TcpStoreServer(uint16_t port) : listener_(net::listen(port)) {
  port_ = net::local_port(listener_);
  if (::pipe2(wake_, O_CLOEXEC) != 0) throw Error(std::string("store: pipe failed: ") + std::strerror(errno));
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  char byte = 1;
  (void)!::write(wake_[1], &byte, 1);
  if (thread_.joinable()) thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TcpStoreServer::serve() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (auto& [fd, client] : clients_) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      ::nabla::logger().error("store server: poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;  // the owner is shutting down
    if (fds[1].revents & POLLIN) accept_client();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = clients_.find(fds[i].fd);
      if (it == clients_.end()) continue;
      if (!read_client(it->first, it->second)) drop(fds[i].fd);
      while (!dropped_.empty()) drop(*dropped_.begin());
    }
  }
}

void TcpStoreServer::accept_client() {
  int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE) {
      // Out of descriptors: the listener stays readable, so without a pause poll() would spin.
      NABLA_LOG_WARN("store server: cannot accept a connection: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return;  // otherwise the client gave up between poll and accept
  }
  net::Socket socket(fd);
  std::string peer = net::peer_name(socket);
  clients_.emplace(fd, Client{std::move(socket), std::move(peer), FrameSplitter()});
}

void TcpStoreServer::drop(int fd) {
  table_.forget(fd);
  clients_.erase(fd);
  dropped_.erase(fd);
}

bool TcpStoreServer::read_client(int fd, Client& client) {
  uint8_t buffer[64 * 1024];
  ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  // Serve every whole frame received so far.
  try {
    client.input.append(buffer, static_cast<size_t>(n));
    while (auto frame = client.input.next()) {
      if (!send_replies(table_.apply(fd, parse_store_request(*frame)), fd)) return false;
    }
  } catch (const std::exception& e) {
    NABLA_LOG_WARN("store server: dropping the connection from {}: {}", client.peer, e.what());
    return false;
  }
  return true;
}

bool TcpStoreServer::send_replies(const std::vector<StoreTable::Reply>& replies, int reader) {
  for (const auto& reply : replies) {
    auto it = clients_.find(reply.client);
    if (it == clients_.end() || dropped_.count(reply.client)) continue;
    try {
      // A client that stops reading its replies holds the store at most this long, once: it is
      // dropped, and nothing more is sent to it.
      net::send_frame(it->second.socket, reply.payload, net::Clock::now() + kReplyTimeout);
    } catch (const std::exception& e) {
      NABLA_LOG_WARN("store server: dropping the connection from {}: {}", it->second.peer, e.what());
      table_.forget(reply.client);  // its parked requests complete nothing more
      dropped_.insert(reply.client);
    }
  }
  return !dropped_.count(reader);
}

}  // namespace nabla::distributed
