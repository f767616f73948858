#include "nabla/distributed/process_group.h"

namespace nabla::distributed {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::average:
      return "average";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

void ProcessGroup::check_tensor(const Tensor& t, const char* collective) const {
  NABLA_CHECK(t.defined(), "{}: the tensor is undefined", collective);
  NABLA_CHECK(t.is_contiguous(),
              "{}: the tensor must be contiguous (collectives work on flat memory); "
              "call .contiguous() first",
              collective);
}

}  // namespace nabla::distributed
