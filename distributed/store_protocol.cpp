#include "nabla/distributed/detail/store_protocol.h"

#include <algorithm>
#include <charconv>

#include "nabla/core/error.h"
#include "nabla/distributed/detail/socket.h"

namespace nabla::distributed {

void FrameSplitter::append(const uint8_t* data, size_t size) {
  // Drop what earlier frames consumed once it is most of the buffer, so a stream of small frames
  // costs linear time and the buffer stays near one frame's size.
  if (begin_ > 0 && begin_ >= input_.size() / 2) {
    input_.erase(input_.begin(), input_.begin() + static_cast<ptrdiff_t>(begin_));
    begin_ = 0;
  }
  input_.insert(input_.end(), data, data + size);
}

std::optional<std::vector<uint8_t>> FrameSplitter::next() {
  if (buffered() < 4) return std::nullopt;
  const uint8_t* in = input_.data() + begin_;
  const size_t len = in[0] | (in[1] << 8) | (in[2] << 16) | (size_t{in[3]} << 24);
  if (len > max_frame_) {
    throw Error(
        fmt::format("store: a frame header announces {} bytes; the limit is {} bytes", len, max_frame_));
  }
  if (buffered() < 4 + len) return std::nullopt;
  std::vector<uint8_t> frame(in + 4, in + 4 + len);
  begin_ += 4 + len;
  return frame;
}

std::vector<uint8_t> encode_store_request(const StoreRequest& request) {
  std::vector<uint8_t> out;
  net::put_u8(out, static_cast<uint8_t>(request.op));
  switch (request.op) {
    case StoreOp::set:
      net::put_string(out, request.keys.at(0));
      net::put_bytes(out, request.value.data(), request.value.size());
      break;
    case StoreOp::add:
      net::put_string(out, request.keys.at(0));
      net::put_i64(out, request.delta);
      break;
    case StoreOp::check:
      net::put_string(out, request.keys.at(0));
      break;
    case StoreOp::get:
    case StoreOp::wait:
      net::put_i64(out, static_cast<int64_t>(request.keys.size()));
      for (const auto& k : request.keys) net::put_string(out, k);
      break;
  }
  return out;
}

StoreRequest parse_store_request(const std::vector<uint8_t>& frame) {
  net::Reader r(frame);
  StoreRequest request;
  const uint8_t op = r.u8();
  request.op = static_cast<StoreOp>(op);
  switch (request.op) {
    case StoreOp::set:
      request.keys.push_back(r.string());
      request.value = r.bytes();
      break;
    case StoreOp::add:
      request.keys.push_back(r.string());
      request.delta = r.i64();
      break;
    case StoreOp::check:
      request.keys.push_back(r.string());
      break;
    case StoreOp::get:
    case StoreOp::wait: {
      const int64_t count = r.i64();
      // Each key takes at least its 8-byte length, so a count the frame cannot hold is refused
      // before the loop starts.
      if (count < 0 || static_cast<uint64_t>(count) > frame.size() / 8) {
        throw Error(
            fmt::format("store: malformed message ({} keys in a frame of {} bytes)", count, frame.size()));
      }
      if (count > kMaxStoreKeys) {
        throw Error(fmt::format("store: a request names {} keys; the limit is {}", count, kMaxStoreKeys));
      }
      if (request.op == StoreOp::get && count != 1) {
        throw Error(
            fmt::format("store: malformed message (a get names {} keys; it takes exactly one)", count));
      }
      for (int64_t i = 0; i < count; ++i) request.keys.push_back(r.string());
      break;
    }
    default:
      throw Error(fmt::format("store: unknown operation {}; known are 1 (set) to 5 (check)", op));
  }
  if (!r.done()) throw Error("store: malformed message (trailing bytes after the request)");
  return request;
}

bool StoreTable::ready(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) != 0; });
}

StoreTable::Reply StoreTable::answer(int client, StoreOp op, const std::vector<std::string>& keys) const {
  Reply reply{client, {}};
  if (op == StoreOp::get) {
    const auto& value = data_.at(keys.front());
    net::put_bytes(reply.payload, value.data(), value.size());
  } else {
    reply.payload = {0};
  }
  return reply;
}

void StoreTable::release_parked(std::vector<Reply>& replies) {
  std::vector<Parked> still;
  for (auto& p : parked_) {
    if (ready(p.keys)) {
      replies.push_back(answer(p.client, p.op, p.keys));
    } else {
      still.push_back(std::move(p));
    }
  }
  parked_ = std::move(still);
}

std::vector<StoreTable::Reply> StoreTable::apply(int client, const StoreRequest& request) {
  std::vector<Reply> replies;
  switch (request.op) {
    case StoreOp::set:
      data_[request.keys.front()] = request.value;
      replies.push_back({client, {0}});
      release_parked(replies);
      break;
    case StoreOp::add: {
      const std::string& key = request.keys.front();
      auto found = data_.find(key);
      int64_t value = 0;
      if (found != data_.end() && !found->second.empty()) {
        // Stored as decimal text, like PyTorch's store, so a set("n", "5") then add("n", 1) works.
        const auto* first = reinterpret_cast<const char*>(found->second.data());
        const auto* last = first + found->second.size();
        auto [end, error] = std::from_chars(first, last, value);
        if (error != std::errc() || end != last) {
          throw Error(fmt::format("store: add('{}'): the stored value is not a decimal integer", key));
        }
      }
      if (__builtin_add_overflow(value, request.delta, &value)) {
        throw Error(fmt::format("store: add('{}', {}) overflows int64", key, request.delta));
      }
      const std::string text = std::to_string(value);
      data_[key].assign(text.begin(), text.end());
      Reply reply{client, {}};
      net::put_i64(reply.payload, value);
      replies.push_back(std::move(reply));
      release_parked(replies);
      break;
    }
    case StoreOp::check:
      replies.push_back({client, {static_cast<uint8_t>(data_.count(request.keys.front()) ? 1 : 0)}});
      break;
    case StoreOp::get:
    case StoreOp::wait:
      if (ready(request.keys)) {
        replies.push_back(answer(client, request.op, request.keys));
      } else {
        const auto waiting = std::count_if(parked_.begin(), parked_.end(),
                                           [&](const Parked& p) { return p.client == client; });
        if (static_cast<size_t>(waiting) >= kMaxParkedPerClient) {
          throw Error(fmt::format("store: this client already has {} requests waiting; the limit is {}",
                                  waiting, kMaxParkedPerClient));
        }
        parked_.push_back({client, request.op, request.keys});
      }
      break;
  }
  return replies;
}

void StoreTable::forget(int client) {
  std::erase_if(parked_, [client](const Parked& p) { return p.client == client; });
}

}  // namespace nabla::distributed
