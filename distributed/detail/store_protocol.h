// Internal. The TCP store's protocol without the sockets: the frame splitter that cuts a client's
// byte stream into frames, the request parser, and the table that answers requests. The server
// (tcp_store_server.cpp) only moves bytes between these and its connections, so everything a
// client can send is parsed here, where tests and the fuzz target (tests/fuzz/store_fuzz.cpp)
// reach it without a network.
//
// Anything the store port receives may come from a stranger: every malformed input throws
// nabla::Error naming what was wrong, and the server drops that connection and goes on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nabla::distributed {

enum class StoreOp : uint8_t { set = 1, get = 2, add = 3, wait = 4, check = 5 };

// The largest frame the server accepts, as net::recv_frame's default on the client side. A header
// announcing more is refused before anything is buffered.
inline constexpr size_t kMaxStoreFrame = size_t{1} << 30;
// The most keys one get/wait names, and the most requests one client may have waiting: a
// stranger's frame cannot make the server hold millions of keys.
inline constexpr int64_t kMaxStoreKeys = 1 << 16;
inline constexpr size_t kMaxParkedPerClient = 1024;

// One client's input: bytes in, whole frames (a 4-byte little-endian length, then the payload) out.
class FrameSplitter {
 public:
  explicit FrameSplitter(size_t max_frame = kMaxStoreFrame) : max_frame_(max_frame) {}
  void append(const uint8_t* data, size_t size);
  // The next whole frame's payload, or nullopt until more bytes arrive. Throws when a header
  // announces more than max_frame bytes.
  std::optional<std::vector<uint8_t>> next();
  size_t buffered() const { return input_.size() - begin_; }

 private:
  size_t max_frame_;
  std::vector<uint8_t> input_;
  size_t begin_ = 0;  // consumed bytes at the front of input_, dropped when they pile up
};

struct StoreRequest {
  StoreOp op = StoreOp::set;
  std::vector<std::string> keys{};  // set, add, check: one; get: one; wait: any number
  std::vector<uint8_t> value{};     // set
  int64_t delta = 0;                // add
};

// The frame payload a client sends for `request` (TcpStore's requests, and tests).
std::vector<uint8_t> encode_store_request(const StoreRequest& request);
// Parses one frame. Throws nabla::Error for an unknown operation, a truncated or negative length,
// trailing bytes, or a get without exactly one key.
StoreRequest parse_store_request(const std::vector<uint8_t>& frame);

// The keys and values, and the requests waiting for keys not yet set. Clients are named by an
// integer (the server uses the connection's descriptor).
class StoreTable {
 public:
  struct Reply {
    int client;
    std::vector<uint8_t> payload;
  };

  // Applies a request from `client` and returns the replies it makes due: its own (unless it
  // waits) and those of parked requests it completes. Throws nabla::Error when an add meets a
  // stored value that is not an integer or would overflow.
  std::vector<Reply> apply(int client, const StoreRequest& request);
  // Forgets the parked requests of a client that has gone.
  void forget(int client);
  size_t parked() const { return parked_.size(); }

 private:
  struct Parked {
    int client;
    StoreOp op;
    std::vector<std::string> keys;
  };
  bool ready(const std::vector<std::string>& keys) const;
  Reply answer(int client, StoreOp op, const std::vector<std::string>& keys) const;
  void release_parked(std::vector<Reply>& replies);

  std::map<std::string, std::vector<uint8_t>> data_;
  std::vector<Parked> parked_;
};

}  // namespace nabla::distributed
