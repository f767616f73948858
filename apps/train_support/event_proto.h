// Hand-encoded protobuf for TensorBoard's `Event` message (tensorflow/core/util/event.proto and
// framework/summary.proto), only the fields a scalar log needs:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nabla::train_support {

// The first record of every events file.
std::string encode_file_version_event(double wall_time, std::string_view version = "brain.Event:2");

// An Event whose summary holds one simple_value per (tag, value); values are stored as float32,
// as TensorBoard's simple_value is.
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& scalars);

}  // namespace nabla::train_support
