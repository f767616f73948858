#!/usr/bin/env python3
"""Reference outputs for nabla's image tests, computed by PIL and torchvision (torch 1.13 /
torchvision 0.14). The C++ tests (tests/data/image_*_test.cpp) call this script and compare.

  image_reference.py fixtures DIR SEED
      Writes JPEGs made by PIL from a smooth random image -- rgb.jpg (baseline 4:2:0),
      progressive.jpg, gray.jpg (mode L), cmyk.jpg (Adobe CMYK), image.png, alpha.png (RGBA) -- and,
      for each,
      NAME.rgb: PIL's Image.open(...).convert("RGB") decode as raw HWC bytes. sizes.txt lists
      "NAME WIDTH HEIGHT" per file.
  image_reference.py transforms JOBS.json
      JOBS.json: {"input": raw HWC uint8 path, "height": H, "width": W, "jobs": [...]} where a
      job is {"kind": "resized_crop", "top", "left", "height", "width", "size", "out"} or
      {"kind": "resize_center_crop", "resize", "size", "out"}; a job may name its own image with
      "input", "image_height" and "image_width" (one Python start-up serves many images: it costs
      seconds). Each writes torchvision's output
      (tensor path, bilinear, antialias=False unless the job says "antialias": true) as raw
      HWC bytes to "out".
  image_reference.py folder ROOT OUT
      Writes torchvision.datasets.ImageFolder(ROOT)'s classes ("class NAME" lines) and samples
      ("LABEL RELATIVE_PATH" lines) to OUT, restricted to .jpg/.jpeg/.png like nabla's default.
"""
import json
import os
import sys


def smooth_image(seed, height, width):
    # numpy and PIL only: importing torch would triple the time every fixture set takes.
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    # Low-frequency noise upsampled (bicubic, per channel in float), plus a gradient:
    # JPEG-friendly, never flat, never all zero.
    coarse = rng.random((height // 16 + 2, width // 16 + 2, 3), dtype=np.float32)
    img = np.stack([np.asarray(Image.fromarray(coarse[..., c], mode="F").resize((width, height), Image.BICUBIC))
                    for c in range(3)], axis=-1)
    ramp = np.linspace(0, 1, width, dtype=np.float32)[None, :, None] * 0.3
    img = np.clip(img * 0.7 + ramp, 0.02, 0.98) * 255
    return np.rint(img).astype(np.uint8)  # (H, W, 3)


def fixtures(out_dir, seed):
    from PIL import Image
    os.makedirs(out_dir, exist_ok=True)
    rgb = Image.fromarray(smooth_image(seed, 173, 259), "RGB")
    made = {
        "rgb.jpg": lambda p: rgb.save(p, quality=90),
        "progressive.jpg": lambda p: rgb.save(p, quality=90, progressive=True),
        "gray.jpg": lambda p: rgb.convert("L").save(p, quality=90),
        "cmyk.jpg": lambda p: rgb.convert("CMYK").save(p, quality=95),
        "image.png": lambda p: rgb.save(p),
        "alpha.png": lambda p: Image.merge("RGBA", (*rgb.split(), rgb.convert("L"))).save(p),
    }
    with open(os.path.join(out_dir, "sizes.txt"), "w") as sizes:
        for name, save in made.items():
            path = os.path.join(out_dir, name)
            save(path)
            with Image.open(path) as im:
                decoded = im.convert("RGB")
            with open(path[: path.rindex(".")] + ".rgb", "wb") as f:
                f.write(decoded.tobytes())
            sizes.write(f"{name} {decoded.width} {decoded.height}\n")


def transforms(jobs_path):
    import torch
    import torchvision.transforms.functional as F
    from torchvision.transforms import InterpolationMode
    spec = json.load(open(jobs_path))
    images = {}

    def input_of(job):  # the job's own image if it names one, else the file's
        path = job.get("input", spec.get("input"))
        height, width = job.get("image_height", spec.get("height")), job.get("image_width", spec.get("width"))
        if path not in images:
            raw = open(path, "rb").read()
            img = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
            images[path] = img.reshape(height, width, 3).permute(2, 0, 1)  # (3, H, W)
        return images[path]

    bilinear = InterpolationMode.BILINEAR
    for job in spec["jobs"]:
        img = input_of(job)
        if job["kind"] == "resized_crop":
            out = F.resized_crop(img, job["top"], job["left"], job["height"], job["width"],
                                 [job["size"], job["size"]], bilinear,
                                 antialias=job.get("antialias", False))
        else:
            out = F.center_crop(F.resize(img, job["resize"], bilinear, antialias=job.get("antialias", False)),
                                job["size"])
        with open(job["out"], "wb") as f:
            f.write(out.permute(1, 2, 0).contiguous().numpy().tobytes())


def folder(root, out_path):
    from torchvision.datasets import DatasetFolder  # ImageFolder's scan, with our extensions
    ds = DatasetFolder(root, loader=lambda p: None, extensions=(".jpg", ".jpeg", ".png"))
    with open(out_path, "w") as out:
        for name in ds.classes:
            out.write(f"class {name}\n")
        for path, label in ds.samples:
            out.write(f"{label} {os.path.relpath(path, root)}\n")


if __name__ == "__main__":
    if sys.argv[1] == "fixtures":
        fixtures(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "folder":
        folder(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "transforms":
        transforms(sys.argv[2])
    else:
        sys.exit(f"unknown mode {sys.argv[1]!r}; expected fixtures or transforms")
