// ImageFolder: index once, then read + fused decode per sample; see image_folder.h.
#include "nabla/data/image/image_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <utility>

#include "nabla/core/error.h"
#include "nabla/core/logging.h"
#include "nabla/data/error.h"
#include "nabla/data/image/pipeline.h"
#include "nabla/data/sample_random.h"

namespace nabla::data {

void read_file(const std::string& path, std::vector<uint8_t>& bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  NABLA_CHECK(fd >= 0, "cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    NABLA_CHECK(false, "cannot stat '{}': {}", path, std::strerror(err));
  }
  bytes.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // error, or the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  int err = errno;
  ::close(fd);
  NABLA_CHECK(done == bytes.size(), "cannot read '{}': got {} of {} bytes ({})", path, done, bytes.size(),
              std::strerror(err));
}

struct ImageFolder::CorruptFiles {
  std::mutex mutex;
  std::unordered_set<int64_t> seen;  // dataset indices
};

ImageFolder::ImageFolder(std::string root, ImageTransform transform, ImageFolderOptions options)
    : root_(std::move(root)),
      transform_(transform),
      options_(std::move(options)),
      corrupt_(std::make_unique<CorruptFiles>()) {
  NABLA_CHECK(transform_.size > 0, "ImageFolder output size must be positive, got {}", transform_.size);
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  index_ = index_image_folder(root_, options_.index);
}

ImageFolder::~ImageFolder() = default;
ImageFolder::ImageFolder(ImageFolder&&) noexcept = default;

int64_t ImageFolder::corrupt_files() const {
  std::lock_guard lock(corrupt_->mutex);
  return static_cast<int64_t>(corrupt_->seen.size());
}

void ImageFolder::check_index(int64_t index) const {
  NABLA_CHECK(index >= 0 && index < size(), "ImageFolder index {} out of range [0, {}) for '{}'", index,
              size(), root_);
}

std::string ImageFolder::path(int64_t index) const {
  check_index(index);
  return root_ + "/" + index_.files[static_cast<size_t>(index)];
}

int64_t ImageFolder::label(int64_t index) const {
  check_index(index);
  return index_.labels[static_cast<size_t>(index)];
}

void ImageFolder::note_damage(int64_t index, const std::string& file, const std::string& damage) {
  if (damage.empty()) return;
  std::lock_guard lock(corrupt_->mutex);
  if (corrupt_->seen.insert(index).second) {
    NABLA_LOG_WARN(
        "sample {} ({}): {}; decoded with the damaged part filled in ({} such file(s) so far; "
        "CorruptDataPolicy::error, or nabla-train --strict-jpeg, makes it an error)",
        index, file, damage, corrupt_->seen.size());
  }
}

int64_t ImageFolder::load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext& context) {
  std::string file = path(index);
  thread_local std::vector<uint8_t> bytes;  // one read buffer per worker thread
  try {
    read_file(file, bytes);
    SampleRandom random(context);
    note_damage(index, file, decode_transformed(bytes, transform_, options_.decode, random, pixels));
  } catch (const DataError&) {
    throw;
  } catch (const nabla::Error& e) {
    throw DataError(index, file, e.what());
  }
  return index_.labels[static_cast<size_t>(index)];
}

int64_t ImageFolder::load_deferred(int64_t index, DeferredImage& image, std::span<uint8_t> pixels,
                                   const SampleContext& context) {
  std::string file = path(index);
  try {
    read_file(file, image.bytes);
    const ImageHeader header = read_image_header(image.bytes, options_.decode);
    SampleRandom random(context);
    // nvJPEG says nothing of damaged scan data: a run that makes damage an error
    // (CorruptDataPolicy::error, --strict-jpeg) decodes every file on the CPU, which does.
    image.on_gpu = header.gpu_decodable && options_.decode.corrupt_data == CorruptDataPolicy::warn;
    if (image.on_gpu) {
      // The same draws as decode_transformed's plan; the GPU decodes at full size.
      const ImagePlan plan = plan_image(header, transform_, options_.decode, random);
      image.width = header.width;
      image.height = header.height;
      image.map = plan.map;
      image.flip = plan.flip;
    } else {
      note_damage(index, file, decode_transformed(image.bytes, transform_, options_.decode, random, pixels));
    }
  } catch (const DataError&) {
    throw;
  } catch (const nabla::Error& e) {
    throw DataError(index, file, e.what());
  }
  return index_.labels[static_cast<size_t>(index)];
}

}  // namespace nabla::data
