// Printing tensors, PyTorch style: nested brackets, a shared number format, and summarised
// dims ("...") when the tensor has more than 1000 elements.
#include <ostream>
#include <sstream>

#include "nabla/ops/copy.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

constexpr int64_t kSummaryThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

void print_values(std::ostream& os, const std::vector<double>& values, const Shape& sizes, size_t dim,
                  int64_t offset, int64_t stride_of_dim, bool summarize, bool integral, int indent) {
  const int64_t n = sizes[dim];
  const int64_t inner = numel_of(Shape(sizes.begin() + dim + 1, sizes.end()));
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << "...";
      i = n - kEdgeItems - 1;
      os << (dim + 1 == sizes.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    if (dim + 1 == sizes.size()) {
      double v = values[offset + i];
      if (integral) {
        os << static_cast<long long>(v);
      } else {
        os << fmt::format("{:.4f}", v);
      }
    } else {
      print_values(os, values, sizes, dim + 1, offset + i * inner, inner, summarize, integral, indent + 1);
    }
    if (i + 1 < n) os << (dim + 1 == sizes.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  Tensor host = to(Device::cpu(), kFloat64).contiguous();
  std::vector<double> values = host.to_vector<double>();
  bool integral = !is_floating_point();
  os << "tensor(";
  if (dim() == 0) {
    os << (integral ? fmt::format("{}", static_cast<long long>(values[0]))
                    : fmt::format("{:.4f}", values[0]));
  } else {
    print_values(os, values, sizes(), 0, 0, 0, numel() > kSummaryThreshold, integral, 7);
  }
  os << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad=true";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.to_string();
}

}  // namespace nabla
