#!/usr/bin/env python3
"""The PyTorch side of the ResNet interop test (tests/interop/resnet_torch_test.cpp).

  torch_resnet.py export DIR ARCH...   torchvision model -> DIR/torch_<arch>_{state,io}.safetensors
  torch_resnet.py check DIR ARCH...    DIR/nabla_<arch>_{state,io}.safetensors -> torchvision,
                                       load_state_dict(strict=True), recompute and compare

Both directions exchange plain safetensors files. This machine has torch and torchvision but not
the `safetensors` package, so a small reader and writer of the format lives here: an 8-byte
little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw
little-endian bytes. It is written from the specification, not copied from nabla's C++ code, so
the two implementations check each other.

The "io" file holds what both sides must agree on:
  input (2, 3, 64, 64) float32 and eval.output (2, 1000) from the float32 model in eval mode; in the
  export also labels (2) int64 and, from one train-mode forward + cross-entropy backward of the
  model in float64: train.loss, grad.<param> for a few parameters, and
  train.<bn>.running_mean / running_var / num_batches_tracked after the update.
"""
import json
import struct
import sys

import torch
import torch.nn.functional as F
import torchvision

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "U8": torch.uint8, "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}

# Parameters whose gradients are compared: the stem, a downsample conv, a block's last BN, fc.
GRAD_KEYS = {
    "resnet18": ["conv1.weight", "bn1.weight", "layer2.0.downsample.0.weight", "layer4.1.bn2.weight",
                 "fc.weight", "fc.bias"],
    "resnet50": ["conv1.weight", "bn1.weight", "layer2.0.downsample.0.weight", "layer3.5.conv2.weight",
                 "layer4.2.bn3.weight", "layer4.2.bn3.bias", "fc.weight", "fc.bias"],
}
# BatchNorms whose running statistics are compared after the train-mode forward.
BN_KEYS = {"resnet18": ["bn1", "layer4.1.bn2"], "resnet50": ["bn1", "layer4.2.bn3"]}


def save_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = t.numpy().tobytes()  # native order; this test only runs on little-endian hosts
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)  # the spec's alignment padding
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for c in chunks:
            f.write(c)


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out


def randomize(model, gen):
    """Moves every tensor away from torchvision's defaults (BN weight 1, bias 0, mean 0, var 1;
    the convs keep their seeded He-normal draw, which is already random)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=gen))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=gen))
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))
                m.num_batches_tracked.fill_(int(torch.randint(1, 1000, (1,), generator=gen)))
        model.fc.weight.copy_(0.05 * torch.randn(model.fc.weight.shape, generator=gen))
        model.fc.bias.copy_(0.05 * torch.randn(model.fc.bias.shape, generator=gen))


def build(arch):
    return getattr(torchvision.models, arch)(weights=None)


def eval_output(model, x):
    model.eval()
    with torch.no_grad():
        return model(x)


def train_step(model, arch, x, labels):
    """One train-mode forward + cross-entropy backward: the loss, some gradients, updated BN stats."""
    model.train()
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), labels)
    loss.backward()
    out = {"train.loss": loss.detach()}
    params = dict(model.named_parameters())
    for k in GRAD_KEYS[arch]:
        out["grad." + k] = params[k].grad
    buffers = dict(model.named_buffers())
    for bn in BN_KEYS[arch]:
        for b in ("running_mean", "running_var", "num_batches_tracked"):
            out["train.%s.%s" % (bn, b)] = buffers["%s.%s" % (bn, b)]
    return out


def export(directory, arch, seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    model = build(arch)
    randomize(model, gen)
    # The state dict as PyTorch users have it: before any forward pass changes the BN buffers.
    save_safetensors("%s/torch_%s_state.safetensors" % (directory, arch), model.state_dict())
    x = torch.randn(2, 3, 64, 64, generator=gen)
    labels = torch.randint(0, 1000, (2,), generator=gen)
    io = {"input": x, "labels": labels, "eval.output": eval_output(model, x)}
    # The train step runs in float64: in float32, batch statistics over few elements (2 x 2 x 2 at
    # layer4) make the deep gradients ill-conditioned, and PyTorch's own float32 gradients differ
    # from its float64 ones by a few percent. float64 leaves room for a tight comparison.
    io.update(train_step(model.double(), arch, x.double(), labels))
    save_safetensors("%s/torch_%s_io.safetensors" % (directory, arch), io)


def max_rel_error(actual, expected):
    """max |a - b| relative to the largest |b|: the float32 sums of a deep network differ in their
    last bits by their order, so errors are judged against the tensor's scale."""
    actual, expected = actual.double(), expected.double()
    scale = max(expected.abs().max().item(), 1e-30)
    return (actual - expected).abs().max().item() / scale


def check(directory, arch, tolerance=1e-4):
    """nabla's state dict loads strictly and unchanged, and reproduces nabla's eval output."""
    state = load_safetensors("%s/nabla_%s_state.safetensors" % (directory, arch))
    theirs = load_safetensors("%s/nabla_%s_io.safetensors" % (directory, arch))
    model = build(arch)
    model.load_state_dict(state, strict=True)  # raises, naming every missing/unexpected key
    for k, v in model.state_dict().items():  # loaded exactly, bit for bit
        if not torch.equal(v, state[k]):
            raise SystemExit("%s: %s changed on load" % (arch, k))
    err = max_rel_error(theirs["eval.output"], eval_output(model, theirs["input"]))
    print("%s eval.output max error / scale %.2e (%d tensors loaded strictly)" % (arch, err, len(state)))
    if not err <= tolerance:
        raise SystemExit("%s: nabla's and PyTorch's eval outputs disagree" % arch)


def main(argv):
    if len(argv) < 4 or argv[1] not in ("export", "check") or any(a not in GRAD_KEYS for a in argv[3:]):
        raise SystemExit("usage: torch_resnet.py export|check DIR ARCH... (ARCH in %s)" % ", ".join(GRAD_KEYS))
    torch.set_num_threads(2)
    for arch in argv[3:]:
        if argv[1] == "export":
            export(argv[2], arch, seed=1234 + sorted(GRAD_KEYS).index(arch))
        else:
            check(argv[2], arch)


if __name__ == "__main__":
    main(sys.argv)
