// Public header. Image transforms on uint8 HWC pixels, with torchvision's semantics.
//
// Geometry (Note [Bilinear geometry]): we match torchvision 0.14's tensor path with
// antialias=False, i.e. F.resized_crop / F.resize -> torch.nn.functional.interpolate(mode=
// "bilinear", align_corners=False). Output pixel x samples the source at
//     u = origin + (x + skip + 0.5) * step - 0.5,   clamped to [lo, hi],
// with step = source extent / output extent (AxisMap); the two neighbours floor(u) and floor(u) + 1 (the
// latter clamped to hi) are blended. PIL's path (torchvision's default for PIL images) uses a
// support-widening filter instead; its geometry is the same but its weights differ on
// downscaling, which is why we do not claim to match it. When the JPEG was decoded at a DCT
// scale s, the same map is rescaled to the decoded pixels (scaled()), which is exact because a
// DCT-scaled pixel p covers full-size pixels [p / s, (p + 1) / s).
//
// Randomness comes from SampleRandom, so a sample's crop and flip depend only on
// (seed, epoch, index).
#pragma once

#include <cstdint>
#include <span>

#include "nabla/data/sample_random.h"

namespace nabla::data {

// A crop rectangle in whole pixels of the full-size image (torchvision's i, j, h, w).
struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

struct RandomResizedCropOptions {
  double scale_min = 0.08;  // fraction of the image area
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;  // width / height
  double ratio_max = 4.0 / 3.0;
};

// torchvision's RandomResizedCrop.get_params: ten tries at a random area fraction and a
// log-uniform aspect ratio, then a center crop clamped to the ratio range as the fallback.
CropBox random_resized_crop_box(int64_t height, int64_t width, const RandomResizedCropOptions& options,
                                SampleRandom& random);

// torchvision's Resize(shorter side) output size: the shorter side becomes `shorter`, the longer
// one int(shorter * long / short).
void resized_size(int64_t height, int64_t width, int64_t shorter, int64_t& out_height, int64_t& out_width);

// One axis of Note [Bilinear geometry]: output pixel x samples the source at
//     u = origin + step * (x + skip + 0.5) - 0.5,  clamped to [lo, hi].
struct AxisMap {
  double origin = 0;  // added after the step: the crop's first source pixel (F.resized_crop)
  double skip = 0;    // output pixels cut off before x = 0 (CenterCrop's start after Resize)
  double step = 1;    // source pixels per output pixel
  double lo = 0;      // clamp range of u (pixel centres)
  double hi = 0;
  // Evaluate step * (x + skip + 0.5) - 0.5 with a float step, rounded to float, as PyTorch's CPU
  // upsample_bilinear2d does, so that ties round the same way (full-size decode only).
  bool float_like_pytorch = true;
  // The same map on an image decoded at factor `scale` with `extent` pixels along this axis.
  AxisMap scaled(double scale, int64_t extent) const;
};

struct ResampleMap {
  AxisMap y, x;
};

// Crop `box` of the full-size image and resize it to out_height x out_width (F.resized_crop).
ResampleMap crop_resize_map(const CropBox& box, int64_t out_height, int64_t out_width);

// Resize the image so its shorter side is `shorter`, then take the centred crop of
// out_height x out_width (F.center_crop(F.resize(img, shorter))).
ResampleMap resize_center_crop_map(int64_t height, int64_t width, int64_t shorter, int64_t out_height,
                                   int64_t out_width);

// Writes the (out_height, out_width, channels) bilinear resample of `source`
// (source_height, source_width, channels) through `map` into `out`, mirrored left-right when
// `flip` is set (RandomHorizontalFlip fused into the write).
void resample_bilinear(std::span<const uint8_t> source, int64_t source_height, int64_t source_width,
                       int64_t channels, const ResampleMap& map, std::span<uint8_t> out, int64_t out_height,
                       int64_t out_width, bool flip);

// Normalize for the CPU path: (pixel / 255 - mean[c]) / std[c], from uint8 (H, W, C) to float
// (C, H, W), the layout a CPU model takes.
void normalize_to_chw(std::span<const uint8_t> hwc, int64_t height, int64_t width, int64_t channels,
                      std::span<const float> mean, std::span<const float> std, std::span<float> chw);

// What an ImageDataset does to each decoded image.
struct ImageTransform {
  enum class Kind {
    random_resized_crop,  // training: RandomResizedCrop(size) + RandomHorizontalFlip(flip_p)
    resize_center_crop,   // evaluation: Resize(resize) + CenterCrop(size)
  };
  Kind kind = Kind::random_resized_crop;
  int64_t size = 224;    // square output side
  int64_t resize = 256;  // shorter side before the centre crop (resize_center_crop only)
  RandomResizedCropOptions crop;
  double flip_p = 0.5;  // random_resized_crop only
};

inline ImageTransform imagenet_train_transform(int64_t size = 224) {
  ImageTransform t;
  t.size = size;
  return t;
}
inline ImageTransform imagenet_val_transform(int64_t size = 224, int64_t resize = 256) {
  ImageTransform t;
  t.kind = ImageTransform::Kind::resize_center_crop;
  t.size = size;
  t.resize = resize;
  t.flip_p = 0;
  return t;
}

}  // namespace nabla::data
