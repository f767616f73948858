#!/usr/bin/env python3
"""Makes an ImageNet-like JPEG set from real photos, in the ImageNet folder layout:

    OUT/train/<photo>/<n>.JPEG    --per-photo crops of each source photo (one class per photo)
    OUT/val/<photo>/<n>.JPEG      --val-per-photo more crops of each photo

Each crop is cut and resized exactly as ../shared/bench/torch_loader.py does (random area 0.3-1
of the photo's width, a height of 0.6-0.9 of that, resized to 500 pixels wide, saved at quality
90: about 500x375 and 20-30 kB, like ImageNet's typical image but smaller in bytes). With the same
--src, the train files are byte-identical to the /tmp/jpegs that script benchmarks, so nabla's
`nabla-bench data` and PyTorch measure the same files.

The photos come from Debian's mate-backgrounds package (/usr/share/backgrounds/mate/*/*.jpg).
Needs /usr/bin/python3 with PIL (python3-pil).

    tools/make_jpeg_set.py --out /tmp/jpeg_set                      # nature/*.jpg, 40 + 8 per photo
    tools/make_jpeg_set.py --src /usr/share/backgrounds/mate --recursive --out /tmp/jpeg_set
    tools/make_jpeg_set.py --classes 10 --per-photo 8 --val-per-photo 2 --width 96 --out /tmp/tiny  # CI's set
    tools/make_jpeg_set.py --imagenet --per-photo 400 --val-per-photo 10 --out /tmp/imagenet_like

--imagenet makes ImageNet-sized files instead (issue 47: the bytes a decoder must get through,
about 110 kB a file, decide its speed). Each file draws its size, quality and crop:
- the long side is 500 pixels for 70% of files, 300-499 for 20%, and 500-2000 (log-uniform) for
  10%; the aspect ratio is 4:3, 3:2, 1:1, 16:9 or 5:4 (45/30/10/10/5%), a quarter of them
  portrait: most of ImageNet's photos are 500 wide (Flickr's medium size), with a tail of larger
  ones;
- the quality is drawn from 90-96 (--quality is ignored), 4:2:0 chroma as cameras and Flickr
  write;
- the crop is 40-100% of the largest region of the photo with that aspect ratio, resized with
  bilinear filtering;
- grain: Gaussian noise of --grain levels (default 8) on the three channels alike, as a photo's
  sensor noise. Debian's wallpapers are smoother than photos: without it the files average about
  44 kB, with 8 about 110 kB. The summary prints the average.
"""
import argparse
import glob
import os
import random
import sys


def crops(image, count, width=500):
    """torch_loader.py's crop recipe, drawing from the global `random` in the same order."""
    for _ in range(count):
        s = random.uniform(0.3, 1.0)
        w, h = int(image.width * s), int(image.height * s * random.uniform(0.6, 0.9))
        x0, y0 = random.randint(0, image.width - w), random.randint(0, image.height - h)
        yield image.crop((x0, y0, x0 + w, y0 + h)).resize((width, max(1, int(width * h / w))))


def imagenet_file(image, rng, np_rng, grain):
    """One ImageNet-sized crop of `image` as --imagenet draws it: (PIL image, quality)."""
    from PIL import Image
    import numpy as np

    r = rng.random()
    if r < 0.70:
        long = 500
    elif r < 0.90:
        long = rng.randint(300, 499)
    else:
        long = int(500 * 4 ** rng.random())
    aspect = rng.choices([4 / 3, 3 / 2, 1.0, 16 / 9, 5 / 4], [0.45, 0.30, 0.10, 0.10, 0.05])[0]
    short = max(1, round(long / aspect))
    w, h = (long, short) if rng.random() < 0.75 else (short, long)
    quality = rng.randint(90, 96)
    ratio = w / h
    cw = int(min(image.width, image.height * ratio) * rng.uniform(0.4, 1.0) ** 0.5)
    ch = max(1, int(cw / ratio))
    x0, y0 = rng.randint(0, image.width - cw), rng.randint(0, image.height - ch)
    crop = image.crop((x0, y0, x0 + cw, y0 + ch)).resize((w, h), Image.BILINEAR)
    if grain > 0:
        pixels = np.asarray(crop, dtype=np.float32)
        pixels += np_rng.normal(0.0, grain, pixels.shape[:2] + (1,)).astype(np.float32)
        crop = Image.fromarray(np.clip(pixels + 0.5, 0, 255).astype(np.uint8))
    return crop, quality


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", default="/usr/share/backgrounds/mate/nature", help="folder of .jpg photos")
    parser.add_argument("--recursive", action="store_true", help="also take photos from sub-folders of --src")
    parser.add_argument("--out", required=True, help="output root (train/ and val/ are made inside)")
    parser.add_argument("--per-photo", type=int, default=40, help="train crops per photo (torch_loader.py: 40)")
    parser.add_argument("--val-per-photo", type=int, default=8, help="val crops per photo")
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--classes", type=int, default=0, help="use only the first N photos (0: all)")
    parser.add_argument("--width", type=int, default=500, help="crop width in pixels (torch_loader.py: 500)")
    parser.add_argument("--seed", type=int, default=0, help="torch_loader.py uses 0")
    parser.add_argument("--imagenet", action="store_true",
                        help="ImageNet-sized files (about 110 kB): sizes, quality and grain drawn as above")
    parser.add_argument("--grain", type=float, default=8.0, help="--imagenet: noise in levels of 255 (0: none)")
    args = parser.parse_args()
    if args.grain < 0:
        sys.exit(f"--grain must be at least 0, got {args.grain}")
    try:
        from PIL import Image
    except ImportError:
        sys.exit("make_jpeg_set.py needs PIL: run it with /usr/bin/python3 (Debian's python3-pil)")

    pattern = os.path.join(args.src, "**", "*.jpg") if args.recursive else os.path.join(args.src, "*.jpg")
    photos = sorted(glob.glob(pattern, recursive=args.recursive))
    if not photos:
        sys.exit(f"no .jpg photos under {args.src!r}; install Debian's mate-backgrounds or pass --src")
    if args.classes > 0:
        photos = photos[: args.classes]

    if args.imagenet:
        return make_imagenet(args, photos)
    random.seed(args.seed)
    loaded = []
    n = 0
    # Train crops first, photo by photo, in torch_loader.py's order and numbering.
    for photo in photos:
        image = Image.open(photo).convert("RGB")
        loaded.append(image)
        cls = os.path.splitext(os.path.basename(photo))[0]
        os.makedirs(os.path.join(args.out, "train", cls), exist_ok=True)
        for crop in crops(image, args.per_photo, args.width):
            crop.save(os.path.join(args.out, "train", cls, f"{n:05d}.JPEG"), quality=args.quality)
            n += 1
    # Then validation crops, so adding them never changes the train files.
    for photo, image in zip(photos, loaded):
        cls = os.path.splitext(os.path.basename(photo))[0]
        os.makedirs(os.path.join(args.out, "val", cls), exist_ok=True)
        for crop in crops(image, args.val_per_photo, args.width):
            crop.save(os.path.join(args.out, "val", cls, f"{n:05d}.JPEG"), quality=args.quality)
            n += 1

    summarize(args, photos)


def make_imagenet(args, photos):
    """--imagenet: the same layout and numbering, ImageNet-sized files."""
    from PIL import Image
    try:
        import numpy as np
    except ImportError:
        sys.exit("make_jpeg_set.py --imagenet needs numpy: run it with /usr/bin/python3 (Debian's python3-numpy)")
    rng, np_rng = random.Random(args.seed), np.random.default_rng(args.seed)
    images = [Image.open(photo).convert("RGB") for photo in photos]
    n = 0
    for split, count in (("train", args.per_photo), ("val", args.val_per_photo)):
        for photo, image in zip(photos, images):
            cls = os.path.splitext(os.path.basename(photo))[0]
            os.makedirs(os.path.join(args.out, split, cls), exist_ok=True)
            for _ in range(count):
                crop, quality = imagenet_file(image, rng, np_rng, args.grain)
                crop.save(os.path.join(args.out, split, cls, f"{n:05d}.JPEG"), quality=quality, subsampling="4:2:0")
                n += 1
    summarize(args, photos)


def summarize(args, photos):
    files = glob.glob(os.path.join(args.out, "*", "*", "*.JPEG"))
    size = sum(os.path.getsize(f) for f in files) / max(1, len(files))
    print({"photos": len(photos), "train": len(photos) * args.per_photo, "val": len(photos) * args.val_per_photo,
           "avg_kB": round(size / 1024, 1), "out": args.out})


if __name__ == "__main__":
    main()
