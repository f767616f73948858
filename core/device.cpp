#include "nabla/core/device.h"

#include <charconv>

#include "nabla/core/error.h"

namespace nabla {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0 && index < 128)
      return cuda(index);
  }
  NABLA_CHECK(false, "invalid device '{}' (expected 'cpu', 'cuda' or 'cuda:N' with 0 <= N < 128)", text);
  return cpu();
}

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
}

}  // namespace nabla
