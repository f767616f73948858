// Public header. Device: where a tensor's memory lives (cpu, or cuda:N).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace nabla {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int8_t index = 0;  // always 0 on the CPU

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::CUDA, static_cast<int8_t>(index)}; }
  // Parses "cpu", "cuda" and "cuda:N"; throws nabla::Error naming the accepted forms otherwise.
  static Device parse(std::string_view text);

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;

  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
};

}  // namespace nabla

template <>
struct std::hash<nabla::Device> {
  size_t operator()(nabla::Device d) const noexcept {
    return static_cast<size_t>(d.type) * 256 + static_cast<size_t>(d.index);
  }
};
