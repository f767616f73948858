#include "nabla/distributed/tcp_store.h"

#include "nabla/distributed/detail/socket.h"
#include "nabla/distributed/detail/tcp_store_server.h"
#include "nabla/distributed/env.h"

namespace nabla::distributed {
namespace {

std::string seconds(std::chrono::milliseconds t) {
  return fmt::format("{:.1f} s", t.count() / 1000.0);
}

}  // namespace

TcpStore::TcpStore(std::string host, uint16_t port, TcpStoreOptions options)
    : host_(std::move(host)), port_(port), options_(options) {
  timeout_ = options.timeout;
  if (options.is_server) {
    server_ = std::make_unique<TcpStoreServer>(port);
    port_ = server_->port();
  }
  socket_ = std::make_unique<net::Socket>(
      net::connect(options.is_server ? "127.0.0.1" : host_, port_, options.connect_timeout));
}

TcpStore::~TcpStore() = default;

std::unique_ptr<TcpStore> TcpStore::from_env(TcpStoreOptions options) {
  const DistributedEnv env = distributed_env();
  options.is_server = env.rank == 0;
  return std::make_unique<TcpStore>(env.master_addr, static_cast<uint16_t>(env.master_port), options);
}

std::vector<uint8_t> TcpStore::request(const std::vector<uint8_t>& payload, std::chrono::milliseconds timeout,
                                       const std::string& what) {
  std::lock_guard lock(mutex_);
  // A previous call timed out and dropped its connection (its reply could still arrive), or the
  // store restarted: connect afresh.
  if (!socket_->valid()) *socket_ = net::connect(host_, port_, options_.connect_timeout);
  net::send_frame(*socket_, payload);
  auto reply = net::recv_frame(*socket_, net::Clock::now() + timeout);
  if (!reply) {
    socket_->close();
    throw StoreTimeoutError(
        fmt::format("store {}:{}: timed out after {} waiting for {}; the rank that should set it may have "
                    "failed or not started",
                    host_, port_, seconds(timeout), what));
  }
  return std::move(*reply);
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  const auto out = encode_store_request({.op = StoreOp::set, .keys = {key}, .value = value});
  request(out, options_.connect_timeout, fmt::format("set('{}') to be acknowledged", key));
}

Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  auto reply = request(encode_store_request({.op = StoreOp::get, .keys = {key}}), timeout,
                       fmt::format("key '{}'", key));
  net::Reader r(reply);
  return r.bytes();
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  const auto out = encode_store_request({.op = StoreOp::add, .keys = {key}, .delta = delta});
  auto reply = request(out, options_.connect_timeout, fmt::format("add('{}') to be acknowledged", key));
  net::Reader r(reply);
  return r.i64();
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string names;
  for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
  request(encode_store_request({.op = StoreOp::wait, .keys = keys}), timeout, "keys " + names);
}

bool TcpStore::check(const std::string& key) {
  const auto out = encode_store_request({.op = StoreOp::check, .keys = {key}});
  auto reply = request(out, options_.connect_timeout, fmt::format("check('{}') to be answered", key));
  return !reply.empty() && reply[0] == 1;
}

}  // namespace nabla::distributed
