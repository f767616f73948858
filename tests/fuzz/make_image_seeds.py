#!/usr/bin/python3
"""Writes the jpeg_fuzz seeds: small images (a few hundred bytes each) in every layout the image
reader meets: baseline (4:2:0), progressive, grayscale, CMYK and 4:4:4 JPEGs;
RGB, RGBA, palette and 16-bit grayscale PNGs. Made with Debian's PIL, not with nabla.

    /usr/bin/python3 tests/fuzz/make_image_seeds.py tests/fuzz/corpus/jpeg_fuzz
"""
import os
import sys

from PIL import Image


def gradient(width, height):
    image = Image.new("RGB", (width, height))
    image.putdata([((x * 255) // width, (y * 255) // height, ((x + y) * 37) % 256)
                   for y in range(height) for x in range(width)])
    return image


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    rgb = gradient(23, 17)
    seeds = {
        "baseline.jpg": lambda p: rgb.save(p, quality=75),
        "progressive.jpg": lambda p: rgb.save(p, quality=75, progressive=True),
        "gray.jpg": lambda p: rgb.convert("L").save(p, quality=75),
        "cmyk.jpg": lambda p: rgb.convert("CMYK").save(p, quality=75),
        "full444.jpg": lambda p: rgb.save(p, quality=75, subsampling=0),
        "rgb.png": lambda p: rgb.save(p),
        "rgba.png": lambda p: Image.merge("RGBA", (*rgb.split(), rgb.convert("L"))).save(p),
        "palette.png": lambda p: rgb.convert("P", palette=Image.ADAPTIVE, colors=8).save(p),
        "gray16.png": lambda p: rgb.convert("L").convert("I").save(p),
    }
    for name, save in seeds.items():
        save(os.path.join(out_dir, name))
        print(name, os.path.getsize(os.path.join(out_dir, name)), "bytes")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_image_seeds.py DIR")
    main(sys.argv[1])
