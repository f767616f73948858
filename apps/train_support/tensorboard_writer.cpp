#include "nabla/apps/train_support/tensorboard_writer.h"

#include <unistd.h>

#include <fmt/format.h>
#include <chrono>
#include <filesystem>

#include "nabla/apps/train_support/event_proto.h"
#include "nabla/apps/train_support/tfrecord.h"
#include "nabla/core/error.h"

namespace nabla::train_support {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& directory) : file_(nullptr, &std::fclose) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  NABLA_CHECK(!ec, "TensorBoardWriter: cannot create the directory '{}': {}", directory, ec.message());
  // TensorBoard finds files by the "tfevents" in their name; the pid keeps two writers that start
  // in the same second (e.g. a restart) apart.
  path_ = (std::filesystem::path(directory) / fmt::format("events.out.tfevents.{}.{}.{}",
                                                          static_cast<int64_t>(now_seconds()), hostname(),
                                                          ::getpid()))
              .string();
  file_.reset(std::fopen(path_.c_str(), "wb"));
  NABLA_CHECK(file_ != nullptr, "TensorBoardWriter: cannot create '{}'", path_);
  append(encode_file_version_event(now_seconds()));
}

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, double>>& scalars) {
  for (const auto& [tag, _] : scalars)
    NABLA_CHECK(!tag.empty(), "TensorBoardWriter::add_scalars: a tag is empty");
  append(encode_scalars_event(now_seconds(), step, scalars));
}

void TensorBoardWriter::append(const std::string& event) {
  const std::string record = frame_tfrecord(event);
  bool ok = std::fwrite(record.data(), 1, record.size(), file_.get()) == record.size();
  ok = ok && std::fflush(file_.get()) == 0;
  NABLA_CHECK(ok, "TensorBoardWriter: cannot write to '{}' (disk full?)", path_);
}

}  // namespace nabla::train_support
