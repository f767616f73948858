// The fused decode + crop + resize + flip path; see pipeline.h.
#include "nabla/data/image/pipeline.h"

#include <vector>

#include "nabla/core/error.h"

namespace nabla::data {

ImagePlan plan_image(const ImageHeader& header, const ImageTransform& transform, const DecodeOptions& options,
                     SampleRandom& random) {
  NABLA_CHECK(transform.size > 0, "image transform size must be positive, got {}", transform.size);
  ImagePlan plan;
  auto size = static_cast<double>(transform.size);
  if (transform.kind == ImageTransform::Kind::random_resized_crop) {
    plan.crop = random_resized_crop_box(header.height, header.width, transform.crop, random);
    plan.flip = random.bernoulli(transform.flip_p);  // drawn after the crop, as torchvision's Compose does
    plan.map = crop_resize_map(plan.crop, transform.size, transform.size);
    // The crop must still be at least size x size decoded pixels, so the bilinear step only
    // ever shrinks by less than 2x or enlarges, never skips source pixels.
    if (options.dct_scaling && header.format == ImageFormat::jpeg) {
      plan.scale = choose_jpeg_scale(static_cast<double>(plan.crop.width),
                                     static_cast<double>(plan.crop.height), size, size);
    }
  } else {
    plan.crop = {.top = 0, .left = 0, .height = header.height, .width = header.width};
    plan.map =
        resize_center_crop_map(header.height, header.width, transform.resize, transform.size, transform.size);
    if (options.dct_scaling && header.format == ImageFormat::jpeg) {
      int64_t resized_h = 0, resized_w = 0;
      resized_size(header.height, header.width, transform.resize, resized_h, resized_w);
      plan.scale = choose_jpeg_scale(header.width, header.height, static_cast<double>(resized_w),
                                     static_cast<double>(resized_h));
    }
  }
  return plan;
}

std::string decode_transformed(std::span<const uint8_t> bytes, const ImageTransform& transform,
                               const DecodeOptions& options, SampleRandom& random, std::span<uint8_t> out) {
  auto expected = static_cast<size_t>(transform.size * transform.size * 3);
  NABLA_CHECK(out.size() == expected, "image slot holds {} bytes, expected {}x{}x3 = {}", out.size(),
              transform.size, transform.size, expected);
  ImageHeader header = read_image_header(bytes, options);
  ImagePlan plan = plan_image(header, transform, options, random);
  thread_local DecodedImage decoded;  // reused: one full-image buffer per worker thread
  decode_image(bytes, header, plan.scale, decoded);
  apply_corrupt_data_policy(decoded, options);
  double scale = decoded.scale.value();
  ResampleMap map = plan.map;
  if (scale != 1.0) map = {.y = map.y.scaled(scale, decoded.height), .x = map.x.scaled(scale, decoded.width)};
  resample_bilinear(decoded.pixels, decoded.height, decoded.width, 3, map, out, transform.size,
                    transform.size, plan.flip);
  // Keep the buffer for the next image, unless one huge picture grew it: 16 workers each holding
  // a few hundred MB after one 100-megapixel file would be a leak in all but name.
  constexpr size_t kKeepBytes = size_t{48} << 20;  // a 4000 x 4000 RGB image
  if (decoded.pixels.capacity() > kKeepBytes) std::vector<uint8_t>().swap(decoded.pixels);
  return decoded.corrupt_data;
}

}  // namespace nabla::data
