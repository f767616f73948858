// Public header. ImageFolder: an ImageNet-layout folder (root/<class>/<image>.JPEG) as an
// ImageDataset of fixed-size uint8 HWC images.
//
//   auto train = nb::data::ImageFolder("/data/imagenet/train", nb::data::imagenet_train_transform(224));
//   auto val = nb::data::ImageFolder("/data/imagenet/val", nb::data::imagenet_val_transform(224),
//                                    {.index = {.cache_path = "/tmp/val.index"}});
//
// Class indices and sample order match torchvision.datasets.ImageFolder (folder_index.h). Each
// load_into() reads the file, decodes it at the smallest DCT scale the crop allows, and writes the
// crop straight into the caller's slot (pipeline.h). A file that cannot be read or decoded
// raises DataError naming the sample's index and path. A JPEG whose scan data is damaged but
// decodes (DecodeOptions::corrupt_data = warn, the default) is logged once and counted
// (corrupt_files()); with CorruptDataPolicy::error it is a DataError like any other bad file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nabla/data/dataset.h"
#include "nabla/data/image/decode.h"
#include "nabla/data/image/deferred_image.h"
#include "nabla/data/image/folder_index.h"
#include "nabla/data/image/transforms.h"

namespace nabla::data {

struct ImageFolderOptions {
  DecodeOptions decode;      // pixel limit, PNG policy, DCT scaling
  FolderIndexOptions index;  // extensions, cache file
};

class ImageFolder : public ImageDataset {
 public:
  ImageFolder(std::string root, ImageTransform transform, ImageFolderOptions options = {});
  ~ImageFolder() override;
  ImageFolder(ImageFolder&&) noexcept;

  int64_t size() const override { return static_cast<int64_t>(index_.files.size()); }
  ImageShape image_shape() const override { return {.height = transform_.size, .width = transform_.size}; }
  int64_t num_classes() const override { return static_cast<int64_t>(index_.classes.size()); }
  int64_t load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext& context) override;
  // Reads the file and its header; a JPEG the GPU decoder takes (ImageHeader::gpu_decodable) gets
  // its crop and flip planned, anything else is decoded here as load_into decodes it.
  int64_t load_deferred(int64_t index, DeferredImage& image, std::span<uint8_t> pixels,
                        const SampleContext& context) override;
  std::string describe(int64_t index) const override { return path(index); }

  const std::vector<std::string>& classes() const { return index_.classes; }
  std::string path(int64_t index) const;  // root/<class>/<file>
  int64_t label(int64_t index) const;
  bool index_from_cache() const { return index_.from_cache; }
  const ImageTransform& transform() const { return transform_; }
  // How many distinct files decoded with damaged JPEG data so far (each is logged once).
  int64_t corrupt_files() const;

 private:
  void check_index(int64_t index) const;
  // Logs a file's damaged JPEG data once ("" = whole).
  void note_damage(int64_t index, const std::string& file, const std::string& damage);

  std::string root_;
  ImageTransform transform_;
  ImageFolderOptions options_;
  FolderIndex index_;
  struct CorruptFiles;  // which files were logged: loader threads share it
  std::unique_ptr<CorruptFiles> corrupt_;
};

// Reads a whole file into `bytes` (reusing its capacity). Throws nabla::Error naming the path.
void read_file(const std::string& path, std::vector<uint8_t>& bytes);

}  // namespace nabla::data
