// TensorBoard scalar logging written by nabla itself, with no TensorFlow or protobuf library: an
// events file is TFRecord-framed (tfrecord.h) `Event` protobuf messages, and the few fields a
// scalar needs are encoded by hand (event_proto.h). TensorBoard reads the files directly:
//
//   TensorBoardWriter tb("runs/rn50");            // runs/rn50/events.out.tfevents.<time>.<host>.<pid>
//   tb.add_scalars(step, {{"train/loss", 0.71}, {"train/lr", 0.1}});
//
// Every call appends whole records and flushes, so a crash loses at most the record in flight and
// TensorBoard can follow the file while training runs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nabla::train_support {

class TensorBoardWriter {
 public:
  // Creates `directory` if needed and a new events file in it, starting with the
  // file_version record ("brain.Event:2") that TensorBoard expects first.
  explicit TensorBoardWriter(const std::string& directory);

  // One Event at `step` holding every (tag, value) pair as a simple_value. Tags must be non-empty.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  void add_scalar(int64_t step, const std::string& tag, double value) { add_scalars(step, {{tag, value}}); }

  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);

  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
};

}  // namespace nabla::train_support
