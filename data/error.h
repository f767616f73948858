// Public header. DataError: a sample could not be read, with which sample and which file.
//
// The loader rethrows a worker's DataError on the caller's thread, so the message and the two
// accessors name the dataset index and the source (a file path, or "idx:<file>:<record>") of
// the sample that failed. Any other exception a worker raises is wrapped into a DataError.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "nabla/core/error.h"

namespace nabla::data {

class DataError : public nabla::Error {
 public:
  // `problem` says what was wrong ("truncated JPEG", "bad IDX magic 0x00000000, expected ...").
  DataError(int64_t index, std::string path, const std::string& problem)
      : nabla::Error(format(index, path, problem)), index_(index), path_(std::move(path)) {}

  int64_t index() const { return index_; }           // dataset index, -1 when not about one sample
  const std::string& path() const { return path_; }  // file or source of the sample

 private:
  static std::string format(int64_t index, const std::string& path, const std::string& problem) {
    std::string where = index >= 0 ? "sample " + std::to_string(index) : std::string("dataset");
    if (!path.empty()) where += " (" + path + ")";
    return where + ": " + problem;
  }
  int64_t index_;
  std::string path_;
};

}  // namespace nabla::data
