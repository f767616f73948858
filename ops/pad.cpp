// pad: each padded dim becomes a cat of (before, x, after) along it, the pieces being views of x
// (narrow, expand) or constant blocks, so the gradient is cat's and narrow's.
#include "nabla/ops/pad.h"

#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant:
      return "constant";
    case PadMode::Reflect:
      return "reflect";
    case PadMode::Replicate:
      return "replicate";
    case PadMode::Circular:
      return "circular";
  }
  return "?";
}

// Elements first, first - 1, ..., first - count + 1 of dim d (descending), as one tensor.
Tensor reversed(const Tensor& x, int64_t d, int64_t first, int64_t count) {
  TensorList pieces;
  for (int64_t i = 0; i < count; ++i) pieces.push_back(x.narrow(d, first - i, 1));
  return cat(pieces, d);
}

Tensor pad_dim(const Tensor& x, int64_t d, int64_t before, int64_t after, const PadOptions& o) {
  const int64_t n = x.size(d);
  if (o.mode == PadMode::Constant) {
    Tensor y = x;
    if (before < 0) y = y.narrow(d, -before, y.size(d) + before), before = 0;
    if (after < 0) y = y.narrow(d, 0, y.size(d) + after), after = 0;
    TensorList pieces;
    auto block = [&](int64_t size) {
      Shape s = y.sizes();
      s[d] = size;
      return full(s, o.value, y.options());
    };
    if (before > 0) pieces.push_back(block(before));
    pieces.push_back(y);
    if (after > 0) pieces.push_back(block(after));
    return pieces.size() == 1 ? y : cat(pieces, d);
  }
  TensorList pieces;
  switch (o.mode) {
    case PadMode::Reflect:
      if (before > 0) pieces.push_back(reversed(x, d, before, before));  // x[before], ..., x[1]
      pieces.push_back(x);
      if (after > 0) pieces.push_back(reversed(x, d, n - 2, after));  // x[n-2], ..., x[n-1-after]
      break;
    case PadMode::Replicate: {
      auto edge = [&](int64_t at, int64_t size) {
        Shape s = x.sizes();
        s[d] = size;
        return x.narrow(d, at, 1).expand(s);
      };
      if (before > 0) pieces.push_back(edge(0, before));
      pieces.push_back(x);
      if (after > 0) pieces.push_back(edge(n - 1, after));
      break;
    }
    default:  // Circular
      if (before > 0) pieces.push_back(x.narrow(d, n - before, before));
      pieces.push_back(x);
      if (after > 0) pieces.push_back(x.narrow(d, 0, after));
  }
  return pieces.size() == 1 ? x : cat(pieces, d);
}

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadOptions options) {
  ops::check_defined("pad", x, "input");
  const int64_t dims = static_cast<int64_t>(pads.size()) / 2;
  NABLA_CHECK(pads.size() % 2 == 0 && dims <= x.dim(),
              "pad: expected (before, after) pairs for at most the {} dims of {}, got {} values", x.dim(),
              describe(x), pads.size());
  Tensor y = x;
  for (int64_t i = 0; i < dims; ++i) {
    const int64_t d = x.dim() - 1 - i, before = pads[2 * i], after = pads[2 * i + 1], n = x.size(d);
    if (options.mode == PadMode::Constant) {
      NABLA_CHECK(n + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0) >= 0,
                  "pad: cropping ({}, {}) is more than dim {} of {} holds", before, after, d, describe(x));
    } else {
      const int64_t limit = options.mode == PadMode::Reflect    ? n - 1
                            : options.mode == PadMode::Circular ? n
                                                                : -1;
      NABLA_CHECK(before >= 0 && after >= 0 && n > 0 && (limit < 0 || (before <= limit && after <= limit)),
                  "pad: {} padding of dim {} of {} must be >= 0{} (got {} and {})", mode_name(options.mode),
                  d, describe(x), limit < 0 ? " on a non-empty dim" : fmt::format(" and at most {}", limit),
                  before, after);
    }
    y = pad_dim(y, d, before, after, options);
  }
  return y;
}

}  // namespace nabla
