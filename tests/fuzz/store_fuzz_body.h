// The body shared by the libFuzzer target (store_fuzz.cpp) and the corpus test that runs in CI
// (tests/distributed/store_protocol_test.cpp): bytes as one connection's stream to the TCP store,
// cut into frames, each parsed and applied to a table where another client already waits. A
// nabla::Error is the only acceptable failure (the server drops the connection for it); anything
// else is a bug.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nabla/core/error.h"
#include "nabla/distributed/detail/store_protocol.h"

namespace nabla::fuzz {

// Returns the number of requests applied.
inline int store_fuzz_one(const uint8_t* data, size_t size) {
  using namespace nabla::distributed;
  StoreTable table;
  table.apply(2, StoreRequest{.op = StoreOp::wait, .keys = {"a", "b"}});  // released by sets
  table.apply(3, StoreRequest{.op = StoreOp::get, .keys = {"a"}});
  // A small frame cap, so the fuzzer meets the limit without allocating a gigabyte.
  FrameSplitter input(size_t{1} << 16);
  int applied = 0;
  try {
    // In pieces of growing size, as recv() hands them over.
    for (size_t pos = 0, piece = 1; pos < size; pos += piece, piece = piece * 2 + 1) {
      input.append(data + pos, std::min(piece, size - pos));
      while (auto frame = input.next()) {
        for (const auto& reply : table.apply(1, parse_store_request(*frame))) {
          if (reply.client < 1 || reply.client > 3 || reply.payload.empty()) __builtin_trap();
        }
        ++applied;
      }
    }
  } catch (const nabla::Error&) {
  }
  table.forget(2);
  return applied;
}

// One frame: the 4-byte little-endian length, then the payload.
inline std::vector<uint8_t> store_frame(const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out;
  const auto n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// A stream of six requests, one of each kind, that wakes both waiting clients: the seed.
inline std::string store_fuzz_seed() {
  using namespace nabla::distributed;
  std::string out;
  for (const StoreRequest& r : {StoreRequest{.op = StoreOp::set, .keys = {"a"}, .value = {'1'}},
                                StoreRequest{.op = StoreOp::add, .keys = {"a"}, .delta = 5},
                                StoreRequest{.op = StoreOp::get, .keys = {"a"}},
                                StoreRequest{.op = StoreOp::wait, .keys = {"a", "b"}},
                                StoreRequest{.op = StoreOp::set, .keys = {"b"}, .value = {'2'}},
                                StoreRequest{.op = StoreOp::check, .keys = {"b"}}}) {
    const auto frame = store_frame(encode_store_request(r));
    out.append(frame.begin(), frame.end());
  }
  return out;
}

}  // namespace nabla::fuzz
