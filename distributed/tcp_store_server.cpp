#include "nabla/distributed/detail/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
      if (!read_client(it->second)) {
        std::erase_if(parked_, [fd = it->first](const Parked& p) { return p.fd == fd; });
        clients_.erase(it);
      }
    }
  }
}

void TcpStoreServer::accept_client() {
  int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;  // the client gave up between poll and accept
  clients_[fd] = Client{net::Socket(fd), {}};
}

bool TcpStoreServer::read_client(Client& client) {
  uint8_t buffer[64 * 1024];
  ssize_t n = ::recv(client.socket.fd(), buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  client.input.insert(client.input.end(), buffer, buffer + n);
  // Serve every whole frame received so far.
  for (;;) {
    auto& in = client.input;
    if (in.size() < 4) return true;
    size_t len = in[0] | (in[1] << 8) | (in[2] << 16) | (size_t{in[3]} << 24);
    if (in.size() < 4 + len) return true;
    std::vector<uint8_t> frame(in.begin() + 4, in.begin() + 4 + static_cast<ptrdiff_t>(len));
    in.erase(in.begin(), in.begin() + 4 + static_cast<ptrdiff_t>(len));
    try {
      handle(client.socket.fd(), frame);
    } catch (const std::exception& e) {
      NABLA_LOG_WARN("store server: dropping a client that sent a bad request: {}", e.what());
      return false;
    }
  }
}

void TcpStoreServer::handle(int fd, const std::vector<uint8_t>& frame) {
  net::Reader r(frame);
  auto op = static_cast<StoreOp>(r.u8());
  switch (op) {
    case StoreOp::set: {
      std::string key = r.string();
      data_[key] = r.bytes();
      reply(fd, {0});
      release_parked();
      return;
    }
    case StoreOp::add: {
      std::string key = r.string();
      int64_t delta = r.i64();
      auto& stored = data_[key];
      int64_t value = stored.empty() ? 0 : std::stoll(std::string(stored.begin(), stored.end()));
      value += delta;
      std::string text = std::to_string(value);  // stored as text, like PyTorch's store
      stored.assign(text.begin(), text.end());
      std::vector<uint8_t> out;
      net::put_i64(out, value);
      reply(fd, out);
      release_parked();
      return;
    }
    case StoreOp::check: {
      std::string key = r.string();
      reply(fd, {static_cast<uint8_t>(data_.count(key) ? 1 : 0)});
      return;
    }
    case StoreOp::get:
    case StoreOp::wait: {
      std::vector<std::string> keys;
      int64_t count = r.i64();
      for (int64_t i = 0; i < count; ++i) keys.push_back(r.string());
      if (ready(keys)) {
        answer(fd, op, keys);
      } else {
        parked_.push_back({fd, op, std::move(keys)});
      }
      return;
    }
  }
  throw Error(fmt::format("unknown store operation {}", static_cast<int>(op)));
}

bool TcpStoreServer::ready(const std::vector<std::string>& keys) const {
  for (const auto& k : keys) {
    if (!data_.count(k)) return false;
  }
  return true;
}

void TcpStoreServer::answer(int fd, StoreOp op, const std::vector<std::string>& keys) {
  if (op == StoreOp::get) {
    std::vector<uint8_t> out;
    const auto& value = data_.at(keys.front());
    net::put_bytes(out, value.data(), value.size());
    reply(fd, out);
  } else {
    reply(fd, {0});
  }
}

void TcpStoreServer::release_parked() {
  std::vector<Parked> still;
  for (auto& p : parked_) {
    if (ready(p.keys)) {
      answer(p.fd, p.op, p.keys);
    } else {
      still.push_back(std::move(p));
    }
  }
  parked_ = std::move(still);
}

void TcpStoreServer::reply(int fd, const std::vector<uint8_t>& payload) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  try {
    net::send_frame(it->second.socket, payload);
  } catch (const std::exception&) {
    // The client went away; poll() reports the hang-up and removes it.
  }
}

}  // namespace nabla::distributed
