#include "nabla/distributed/detail/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "nabla/core/error.h"
#include "nabla/distributed/store.h"

namespace nabla::distributed::net {
namespace {

std::string system_error(int err) {
  return std::strerror(err);
}

// Milliseconds left until `deadline`, clamped to [0, INT_MAX] for poll().
int millis_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left < 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

// Waits for `events` on the socket until `deadline`. False on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, millis_until(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) throw Error("store socket: poll failed: " + system_error(errno));
  }
}

void set_no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket connect(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw Error(
        fmt::format("store: cannot resolve address '{}' ({}); set MASTER_ADDR to a host "
                    "name or IP address that every rank can reach",
                    host, ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
  const auto deadline = Clock::now() + timeout;
  std::string last_error = "no address";
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    for (addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) {
        last_error = system_error(errno);
        continue;
      }
      if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0) {
        set_no_delay(s.fd());
        return s;
      }
      last_error = system_error(errno);
    }
    auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  throw StoreConnectError(
      fmt::format("store: could not connect to {}:{} within {:.1f} s (last error: {}); is rank 0 running, "
                  "and do MASTER_ADDR and MASTER_PORT name it?",
                  host, port, timeout.count() / 1000.0, last_error));
}

Socket listen(uint16_t port) {
  Socket s(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool ipv6 = s.valid();
  if (!ipv6) s = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) throw Error("store: cannot create a socket: " + system_error(errno));
  int one = 1, zero = 0;
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (ipv6) {
    ::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // accept IPv4 too
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(port);
    rc = ::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(port);
    rc = ::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  if (rc != 0) {
    int err = errno;
    if (err == EADDRINUSE) {
      throw Error(
          fmt::format("store: port {} is already in use on this host; choose a free port (1024-65535), "
                      "or stop the process that holds it. The store listens on MASTER_PORT, or on "
                      "MASTER_PORT + 1 under nabla-run and torchrun, whose launchers hold MASTER_PORT "
                      "(nabla-run's --master-port)",
                      port));
    }
    throw Error(fmt::format("store: cannot listen on port {}: {}", port, system_error(err)));
  }
  if (::listen(s.fd(), 1024) != 0) throw Error("store: listen failed: " + system_error(errno));
  return s;
}

uint16_t local_port(const Socket& socket) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

std::string peer_name(const Socket& socket) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(socket.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "an unknown peer";
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {  // an IPv4 peer on the dual-stack listener
      ::inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], host, sizeof(host));
      return fmt::format("{}:{}", host, ntohs(a->sin6_port));
    }
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    return fmt::format("[{}]:{}", host, ntohs(a->sin6_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
  ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
  return fmt::format("{}:{}", host, ntohs(a->sin_port));
}

void send_frame(const Socket& socket, const std::vector<uint8_t>& payload) {
  send_frame(socket, payload, Clock::time_point::max());  // no deadline: waits as long as the peer lives
}

void send_frame(const Socket& socket, const std::vector<uint8_t>& payload, Clock::time_point deadline) {
  std::vector<uint8_t> frame(4 + payload.size());
  auto n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(frame.data() + 4, payload.data(), payload.size());
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t k = ::send(socket.fd(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(socket.fd(), POLLOUT, deadline)) {
        throw StoreConnectError(
            fmt::format("store: the peer took {} of {} bytes and then stopped reading", sent, frame.size()));
      }
      continue;
    }
    if (k <= 0) throw StoreConnectError("store: connection lost while sending: " + system_error(errno));
    sent += static_cast<size_t>(k);
  }
}

namespace {
// Reads exactly `size` bytes. False on timeout; throws when the peer has gone.
bool recv_exact(const Socket& socket, uint8_t* out, size_t size, Clock::time_point deadline) {
  size_t got = 0;
  while (got < size) {
    if (!wait_for(socket.fd(), POLLIN, deadline)) return false;
    ssize_t k = ::recv(socket.fd(), out + got, size - got, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k == 0) throw StoreConnectError("store: the peer closed the connection");
    if (k < 0) throw StoreConnectError("store: connection lost: " + system_error(errno));
    got += static_cast<size_t>(k);
  }
  return true;
}
}  // namespace

std::optional<std::vector<uint8_t>> recv_frame(const Socket& socket, Clock::time_point deadline,
                                               size_t max_bytes) {
  uint8_t header[4];
  if (!recv_exact(socket, header, 4, deadline)) return std::nullopt;
  size_t n = header[0] | (header[1] << 8) | (header[2] << 16) | (size_t{header[3]} << 24);
  if (n > max_bytes) {
    throw Error(fmt::format("store: a frame of {} bytes exceeds the limit of {} bytes", n, max_bytes));
  }
  std::vector<uint8_t> payload(n);
  // Once a header arrived the rest follows promptly; a stall here is a broken peer, not a wait.
  auto body_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(30));
  if (!recv_exact(socket, payload.data(), n, body_deadline)) {
    throw StoreConnectError("store: the peer stopped in the middle of a message");
  }
  return payload;
}

void put_u8(std::vector<uint8_t>& out, uint8_t v) {
  out.push_back(v);
}
void put_i64(std::vector<uint8_t>& out, int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
}
void put_bytes(std::vector<uint8_t>& out, const uint8_t* data, size_t size) {
  put_i64(out, static_cast<int64_t>(size));
  out.insert(out.end(), data, data + size);
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put_bytes(out, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

void Reader::need(size_t n) const {
  if (data_.size() - pos_ < n) throw Error("store: malformed message (truncated field)");
}
uint8_t Reader::u8() {
  need(1);
  return data_[pos_++];
}
int64_t Reader::i64() {
  need(8);
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= uint64_t{data_[pos_ + i]} << (8 * i);
  pos_ += 8;
  return static_cast<int64_t>(u);
}
std::vector<uint8_t> Reader::bytes() {
  auto n = i64();
  if (n < 0) throw Error("store: malformed message (negative length)");
  need(static_cast<size_t>(n));
  std::vector<uint8_t> v(data_.begin() + static_cast<ptrdiff_t>(pos_),
                         data_.begin() + static_cast<ptrdiff_t>(pos_ + n));
  pos_ += static_cast<size_t>(n);
  return v;
}
std::string Reader::string() {
  auto b = bytes();
  return {b.begin(), b.end()};
}

}  // namespace nabla::distributed::net
