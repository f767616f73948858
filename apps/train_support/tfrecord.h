// TFRecord framing, the container of TensorBoard event files. Each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of
//   data
// The reader checks both CRCs of every record and names the file, the record and the problem, so
// a torn or corrupted events file is reported rather than misread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nabla::train_support {

// One framed record, ready to append to a file.
std::string frame_tfrecord(std::string_view data);

// Every record's data, in order. Throws nabla::Error on a truncated record or a CRC mismatch.
std::vector<std::string> read_tfrecords(const std::string& path);

}  // namespace nabla::train_support
