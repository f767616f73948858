// Public header. Store: the key-value rendezvous that processes of one job meet through.
//
// Rank 0 hosts it (TcpStore); every rank reads and writes it. It carries the NCCL unique id, the
// Gloo addresses and the barriers of start-up, so each call is small and rare: simplicity and
// clear failures matter more than speed. Every blocking call has a timeout and throws
// StoreTimeoutError naming the key it waited for.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "nabla/core/error.h"

namespace nabla::distributed {

using Bytes = std::vector<uint8_t>;

// A blocking store call ran out of time.
class StoreTimeoutError : public Error {
 public:
  using Error::Error;
};

// The store cannot be reached, or a peer dropped the connection.
class StoreConnectError : public Error {
 public:
  using Error::Error;
};

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(5)};

  virtual ~Store() = default;
  // Sets `key`, waking every reader waiting for it. A key can be overwritten.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Returns the value of `key`, waiting until some rank sets it or `timeout` passes.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the integer under `key` (0 if absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Waits until every key in `keys` is set.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // True when `key` is set now; never waits.
  virtual bool check(const std::string& key) = 0;

  Bytes get(const std::string& key) { return get(key, timeout_); }
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return {b.begin(), b.end()};
  }

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

// Keys under a prefix, so that several process groups (or runs) share one store without clashes.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, Store& base) : prefix_(std::move(prefix) + "/"), base_(base) {
    timeout_ = base.timeout();
  }
  void set(const std::string& key, const Bytes& value) override { base_.set(prefix_ + key, value); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_.get(prefix_ + key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_.add(prefix_ + key, delta); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    base_.wait(full, timeout);
  }
  bool check(const std::string& key) override { return base_.check(prefix_ + key); }
  using Store::get;
  using Store::set;
  using Store::wait;

 private:
  std::string prefix_;
  Store& base_;
};

}  // namespace nabla::distributed
