// Internal. Minimal TCP plumbing for the store: an owning socket, resolve + connect with
// retries, listen, and length-prefixed frames read against a deadline.
//
// Every failure throws nabla::Error naming the peer and the system's reason, since a rendezvous
// that fails silently is the hardest bug a multi-process job can have.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nabla::distributed::net {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close();

 private:
  int fd_ = -1;
};

// Connects to host:port, retrying refused or unreachable connections until `timeout` passes
// (rank 0 may start its server after the other ranks start).
Socket connect(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);
// Listens on every interface at `port` (0 picks a free port). Throws a clear error when the
// port is in use.
Socket listen(uint16_t port);
uint16_t local_port(const Socket& socket);
// "address:port" of the connected peer, for messages.
std::string peer_name(const Socket& socket);

// Sends one frame: a 4-byte little-endian length, then the bytes. Throws when the peer is gone.
void send_frame(const Socket& socket, const std::vector<uint8_t>& payload);
// The same, but the whole frame must be taken by `deadline` (one wait in all, not per send call),
// else StoreConnectError: a peer that stops reading cannot hold the sender longer.
void send_frame(const Socket& socket, const std::vector<uint8_t>& payload, Clock::time_point deadline);
// Reads one frame, waiting until `deadline`. Returns nullopt on timeout; throws when the peer
// closed the connection or sent a frame over `max_bytes`.
std::optional<std::vector<uint8_t>> recv_frame(const Socket& socket, Clock::time_point deadline,
                                               size_t max_bytes = size_t{1} << 30);

// Frame contents: strings and integers appended and read back in order.
void put_u8(std::vector<uint8_t>& out, uint8_t v);
void put_i64(std::vector<uint8_t>& out, int64_t v);
void put_bytes(std::vector<uint8_t>& out, const uint8_t* data, size_t size);
void put_string(std::vector<uint8_t>& out, const std::string& s);

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& data) : data_(data) {}
  uint8_t u8();
  int64_t i64();
  std::vector<uint8_t> bytes();
  std::string string();
  bool done() const { return pos_ == data_.size(); }

 private:
  void need(size_t n) const;
  const std::vector<uint8_t>& data_;
  size_t pos_ = 0;
};

}  // namespace nabla::distributed::net
