#!/usr/bin/env python3
"""PyTorch's side of `nabla-bench data --decode gpu` (issue 47): the same JPEG files, decoded
and augmented by torchvision, three ways.

  nvjpeg         the files' bytes in memory; each batch decoded on the GPU by
                 torchvision.io.decode_jpeg(..., device="cuda") (nvJPEG), then per image
                 RandomResizedCrop(224) and a horizontal flip on the GPU, stacked, normalized to
                 bfloat16 channels_last: what nabla's GPU loader does, written with torchvision.
                 One thread.
  nvjpeg-loader  the same decode, with the files read by DataLoader workers (read_file), as a
                 training script feeding nvJPEG would be written.
  dataloader     DataLoader workers decoding on the CPU (torchvision.io.decode_jpeg), then
                 RandomResizedCrop(224) and a flip, uint8, pinned: PyTorch's usual loader.

Each prints one JSON object per line: {"path", "workers", "batch", "images", "seconds", "img_s"}.
--device cpu runs the nvjpeg paths' decode and transforms on the CPU, for testing without a GPU.
If torch or torchvision cannot be imported it prints {"skipped": reason} and exits with status 3.
"""
import argparse
import json
import os
import sys
import time

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
PATHS = ("nvjpeg", "nvjpeg-loader", "dataloader")


def emit(row):
    print(json.dumps(row), flush=True)


def jpeg_files(root):
    """The .jpg/.jpeg files under root (an ImageFolder root, or a flat folder), sorted."""
    found = []
    for folder, _, names in os.walk(root):
        found += [os.path.join(folder, n) for n in names if n.lower().endswith((".jpg", ".jpeg"))]
    if not found:
        sys.exit(f"--root: no .jpg or .jpeg files under '{root}'")
    return sorted(found)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="folder of JPEGs (class folders or flat)")
    p.add_argument("--paths", default=",".join(PATHS), help="a comma list of " + ", ".join(PATHS))
    p.add_argument("--workers", default="4,16", help="DataLoader workers, a comma list (0: the main thread)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--repeat", type=int, default=8, help="passes over the files per measurement")
    p.add_argument("--size", type=int, default=224, help="RandomResizedCrop's output size")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = p.parse_args(argv)
    args.paths = [x.strip() for x in args.paths.split(",")]
    for x in args.paths:
        if x not in PATHS:
            sys.exit(f"--paths: '{x}' is not one of {', '.join(PATHS)}")
    try:
        args.workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        sys.exit(f"--workers: expected a comma list of integers, got '{args.workers}'")
    if any(w < 0 for w in args.workers) or args.batch_size <= 0 or args.repeat <= 0 or args.size <= 0:
        sys.exit("--workers must be >= 0; --batch-size, --repeat and --size positive")
    return args


class Bench:
    def __init__(self, torch, tv, args, files):
        import torchvision.transforms as T

        self.torch, self.tio, self.args = torch, tv.io, args
        self.device = torch.device(args.device)
        self.files = files
        self.crop = T.Compose([T.RandomResizedCrop(args.size, antialias=True), T.RandomHorizontalFlip()])
        self.mean = torch.tensor(MEAN, device=self.device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(STD, device=self.device).view(1, 3, 1, 1) * 255

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def decode(self, datas):
        """A batch of encoded files (uint8 tensors) to RGB images on the device."""
        mode = self.tio.ImageReadMode.RGB
        if self.device.type == "cuda":
            try:  # torchvision 0.19+: one batched nvJPEG call
                return self.tio.decode_jpeg(datas, mode=mode, device=self.device)
            except TypeError:
                return [self.tio.decode_jpeg(d, mode=mode, device=self.device) for d in datas]
        return [self.tio.decode_jpeg(d, mode=mode) for d in datas]

    def batch_on_device(self, datas):
        images = [self.crop(im) for im in self.decode(datas)]
        x = self.torch.stack(images).float()
        x = ((x - self.mean) / self.std).to(self.torch.bfloat16)
        return x.contiguous(memory_format=self.torch.channels_last)

    def batches(self, items):
        b = self.args.batch_size
        return [items[i:i + b] for i in range(0, len(items), b)]

    def row(self, path, workers, images, seconds):
        emit({"path": path, "workers": workers, "batch": self.args.batch_size, "images": images,
              "seconds": round(seconds, 4), "img_s": round(images / seconds, 1)})

    def nvjpeg(self):
        datas = [self.tio.read_file(f) for f in self.files]
        self.batch_on_device(datas[:self.args.batch_size])  # warm-up: nvJPEG's handles, kernels
        self.sync()
        start, images = time.perf_counter(), 0
        for _ in range(self.args.repeat):
            for chunk in self.batches(datas):
                images += self.batch_on_device(chunk).shape[0]
        self.sync()
        self.row("nvjpeg", 0, images, time.perf_counter() - start)

    def loader(self, dataset, workers, collate, pin):
        return self.torch.utils.data.DataLoader(dataset, batch_size=self.args.batch_size, num_workers=workers,
                                                collate_fn=collate, pin_memory=pin, shuffle=True,
                                                persistent_workers=False)

    def nvjpeg_loader(self, workers):
        files, torch = self.files, self.torch

        class Files(torch.utils.data.Dataset):
            def __len__(self):
                return len(files)

            def __getitem__(self, i):  # bytes, not a tensor: no shared-memory handle per file
                with open(files[i], "rb") as f:
                    return f.read()

        def tensors(blobs):
            return [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]

        dl = self.loader(Files(), workers, list, False)
        self.batch_on_device(tensors(next(iter(dl))))
        self.sync()
        start, images = time.perf_counter(), 0
        for _ in range(self.args.repeat):
            for blobs in dl:
                images += self.batch_on_device(tensors(blobs)).shape[0]
        self.sync()
        self.row("nvjpeg-loader", workers, images, time.perf_counter() - start)

    def dataloader(self, workers):
        files, tio, crop = self.files, self.tio, self.crop

        class Images(self.torch.utils.data.Dataset):
            def __len__(self):
                return len(files)

            def __getitem__(self, i):
                return crop(tio.decode_jpeg(tio.read_file(files[i]), mode=tio.ImageReadMode.RGB)), 0

        dl = self.loader(Images(), workers, None, self.device.type == "cuda")
        start, images = time.perf_counter(), 0
        for _ in range(self.args.repeat):
            for x, _ in dl:
                images += x.shape[0]
        self.row("dataloader", workers, images, time.perf_counter() - start)


def main(argv):
    args = parse_args(argv)
    files = jpeg_files(args.root)  # a bad root fails before the slow imports
    try:
        import torch
        import torchvision
    except Exception as e:  # noqa: BLE001 - any import failure means no PyTorch to compare with
        emit({"skipped": f"cannot import torch/torchvision: {e}"})
        return 3
    if args.device == "cuda" and not torch.cuda.is_available():
        emit({"skipped": "torch sees no CUDA device (use --device cpu to test)"})
        return 3
    bench = Bench(torch, torchvision, args, files)
    emit({"jpegs": len(bench.files), "avg_kB": round(sum(os.path.getsize(f) for f in bench.files) /
                                                      len(bench.files) / 1024, 1),
          "torch": torch.__version__, "torchvision": torchvision.__version__})
    if "nvjpeg" in args.paths:
        bench.nvjpeg()
    for workers in args.workers:
        if "nvjpeg-loader" in args.paths:
            bench.nvjpeg_loader(workers)
        if "dataloader" in args.paths:
            bench.dataloader(workers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
