#include "nabla_train/datasets.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "nabla/core/error.h"
#include "nabla/data/cifar.h"
#include "nabla/data/idx.h"
#include "nabla/data/image/image_folder.h"
#include "nabla/data/sample_random.h"
#include "nabla/data/synthetic.h"

namespace nabla::train {

CropFlipDataset::CropFlipDataset(std::shared_ptr<data::ImageDataset> inner, int64_t pad, bool flip)
    : inner_(std::move(inner)), pad_(pad), flip_(flip) {
  NABLA_CHECK(pad_ >= 0, "CropFlipDataset: pad must be >= 0, got {}", pad_);
}

int64_t CropFlipDataset::load_into(int64_t index, std::span<uint8_t> pixels,
                                   const data::SampleContext& context) {
  const auto shape = inner_->image_shape();
  // One scratch image per loader thread: the source must stay intact while it is cropped.
  thread_local std::vector<uint8_t> source;
  source.resize(static_cast<size_t>(shape.bytes()));
  const int64_t label = inner_->load_into(index, source, context);

  // A stream of its own (seed offset), so it never repeats draws the inner dataset made.
  data::SampleContext own = context;
  own.seed ^= 0xC0FFEE5EEDull;
  data::SampleRandom random(own);
  const int64_t dy = pad_ > 0 ? random.integer(-pad_, pad_) : 0;
  const int64_t dx = pad_ > 0 ? random.integer(-pad_, pad_) : 0;
  const bool flip = flip_ && random.bernoulli(0.5);

  const int64_t h = shape.height, w = shape.width, c = shape.channels;
  for (int64_t y = 0; y < h; ++y) {
    const int64_t sy = y + dy;
    uint8_t* out_row = pixels.data() + y * w * c;
    if (sy < 0 || sy >= h) {  // the zero padding
      std::memset(out_row, 0, static_cast<size_t>(w * c));
      continue;
    }
    for (int64_t x = 0; x < w; ++x) {
      const int64_t sx = (flip ? w - 1 - x : x) + dx;
      uint8_t* out = out_row + x * c;
      if (sx < 0 || sx >= w) {
        std::memset(out, 0, static_cast<size_t>(c));
      } else {
        std::memcpy(out, source.data() + (sy * w + sx) * c, static_cast<size_t>(c));
      }
    }
  }
  return label;
}

TrainData make_data(const TrainOptions& o, const Recipe& r) {
  TrainData d;
  if (r.data_kind == "fashion-mnist") {
    // Fashion-MNIST has 10 classes: a label past them is a broken file, not an 11th class.
    const data::IdxOptions fashion_mnist{.num_classes = 10};
    auto train = data::IdxDataset::open(r.data_path, /*train=*/true, fashion_mnist);
    d.val = data::IdxDataset::open(r.data_path, /*train=*/false, fashion_mnist);
    // TARGETS.md: the small CNN trains on plain images, the ResNet-18 recipe adds a random flip.
    d.train = r.arch == "smallcnn" ? std::shared_ptr<data::ImageDataset>(train)
                                   : std::make_shared<CropFlipDataset>(train, 0, true);
    d.mean = {0.2860f};
    d.stddev = {0.3530f};
  } else if (r.data_kind == "cifar10") {
    d.train = std::make_shared<CropFlipDataset>(data::CifarDataset::open(r.data_path, true), 4, true);
    d.val = data::CifarDataset::open(r.data_path, false);
    d.mean = {0.4914f, 0.4822f, 0.4465f};
    d.stddev = {0.2470f, 0.2435f, 0.2616f};
  } else if (r.data_kind == "synthetic") {
    const int64_t classes = o.num_classes > 0 ? o.num_classes : 1000;
    const data::ImageShape shape{.height = r.image_size, .width = r.image_size, .channels = 3};
    d.train = std::make_shared<data::SyntheticDataset>(data::SyntheticOptions{
        .size = o.synthetic_size, .shape = shape, .num_classes = classes, .seed = o.seed});
    d.val = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions{.size = std::max<int64_t>(o.synthetic_size / 10, 1),
                               .shape = shape,
                               .num_classes = classes,
                               .seed = o.seed + 1});
    d.mean = {0.485f, 0.456f, 0.406f};
    d.stddev = {0.229f, 0.224f, 0.225f};
  } else {
    const auto root = std::filesystem::path(r.data_path);
    data::ImageFolderOptions folder;  // PNGs that hide behind .jpg names are decoded
    if (o.strict_jpeg) folder.decode.corrupt_data = data::CorruptDataPolicy::error;
    auto train = std::make_shared<data::ImageFolder>((root / "train").string(),
                                                     data::imagenet_train_transform(r.image_size), folder);
    auto val = std::make_shared<data::ImageFolder>(
        (root / "val").string(), data::imagenet_val_transform(r.image_size, r.val_resize), folder);
    NABLA_CHECK(train->size() > 0, "--data {}: train/ holds no images", r.data_path);
    NABLA_CHECK(val->size() > 0, "--data {}: val/ holds no images", r.data_path);
    NABLA_CHECK(train->classes() == val->classes(),
                "--data {}: train/ has {} class folders and val/ has {}; they must be the same classes",
                r.data_path, train->classes().size(), val->classes().size());
    d.train = train;
    d.val = val;
    d.mean = {0.485f, 0.456f, 0.406f};
    d.stddev = {0.229f, 0.224f, 0.225f};
  }
  d.channels = d.train->image_shape().channels;
  d.num_classes = o.num_classes > 0 ? o.num_classes : d.train->num_classes();
  NABLA_CHECK(d.num_classes >= d.train->num_classes(),
              "--num-classes {}: the data has {} classes; the model needs at least that many outputs",
              o.num_classes, d.train->num_classes());
  return d;
}

}  // namespace nabla::train
