// stack_collate: the default collate of the generic loader path. Checks shapes and dtypes first
// so that a mismatch names the two examples, rather than surfacing as a stack() shape error.
#include <fmt/format.h>

#include "nabla/core/error.h"
#include "nabla/data/data_loader.h"
#include "nabla/ops/indexing.h"

namespace nabla::data {

namespace {

Tensor stack_field(std::span<const Example> examples, Tensor Example::*field, const char* name) {
  const Tensor& first = examples.front().*field;
  NABLA_CHECK(first.defined(), "stack_collate: example 0 has no {}", name);
  TensorList parts;
  parts.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor& t = examples[i].*field;
    NABLA_CHECK(t.defined(), "stack_collate: example {} of the batch has no {}", i, name);
    NABLA_CHECK(t.sizes() == first.sizes() && t.dtype() == first.dtype(),
                "stack_collate: every {} in a batch must have the same shape and dtype; example 0 is {} "
                "but example {} is {} (pass a custom collate to batch ragged examples)",
                name, describe(first), i, describe(t));
    parts.push_back(t);
  }
  return stack(parts, 0);
}

}  // namespace

Example stack_collate(std::span<const Example> examples) {
  NABLA_CHECK(!examples.empty(), "stack_collate: a batch needs at least one example");
  return {.input = stack_field(examples, &Example::input, "input"),
          .target = stack_field(examples, &Example::target, "target")};
}

}  // namespace nabla::data
