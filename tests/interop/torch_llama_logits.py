#!/usr/bin/env python3
"""The PyTorch side of the LLaMA interop test (tests/interop/llama_torch_test.cpp).

  torch_llama_logits.py OUT.safetensors SEED [llama3|plain|cuda] [FOLDER]

Builds the hand-written LLaMA of torch_llama_model.py (Hugging Face's keys) at a small size with
grouped-query attention, draws every parameter at random (RMSNorm gains too), and writes one
safetensors file: "state.<key>" (the state dict, with the rotary_emb.inv_freq buffers older files
carry), "tokens" (int64) and "logits" (float64, computed in float64). With "llama3" the rotary
frequencies take Llama 3's rope_scaling (LLAMA3 below: small enough that the head size 8 has a
frequency in each of its three bands). With FOLDER it also writes the model there as Hugging Face
does: config.json (its field names) and the state dict split over two shards behind
model.safetensors.index.json. With "cuda" (plain frequencies) it also writes "logits32": the
same model's logits computed in float32 on the GPU (TF32 off), PyTorch 2.11's reference for
nabla's CUDA float32 logits.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from torch_llama_model import Llama  # noqa: E402
from torch_resnet import save_safetensors  # noqa: E402  (the same small writer)

CONFIG = dict(vocab=89, layers=2, heads=4, kv_heads=2, width=32, hidden=48, base=500.0, eps=1e-5)
LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)


def save_folder(folder, model, scaled):
    """config.json and two shards (layer 0 and the embedding; the rest) with their index."""
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "vocab_size": CONFIG["vocab"], "hidden_size": CONFIG["width"],
        "intermediate_size": CONFIG["hidden"], "num_hidden_layers": CONFIG["layers"],
        "num_attention_heads": CONFIG["heads"], "num_key_value_heads": CONFIG["kv_heads"],
        "max_position_embeddings": 32, "rms_norm_eps": CONFIG["eps"], "rope_theta": CONFIG["base"],
        "rope_scaling": dict(LLAMA3, rope_type="llama3") if scaled else None,
        "tie_word_embeddings": False, "torch_dtype": "float64",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    shards, weight_map = ({}, {}), {}
    for key, value in model.state_dict().items():
        which = 0 if ("layers.0." in key or "embed_tokens" in key) else 1
        shards[which][key] = value
        weight_map[key] = names[which]
    for name, tensors in zip(names, shards):
        save_safetensors(os.path.join(folder, name), tensors)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)


def main(out, seed, scaled, folder=None, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    model = Llama(**CONFIG, scaling=LLAMA3 if scaled else None).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm gains: random, not 1
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    tokens = torch.randint(0, CONFIG["vocab"], (3, 17), generator=gen)
    with torch.no_grad():
        logits = model(tokens)
    tensors = {f"state.{k}": v for k, v in model.state_dict().items()}
    tensors["tokens"] = tokens
    tensors["logits"] = logits
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        with torch.no_grad():
            tensors["logits32"] = model.float().cuda()(tokens.cuda()).double().cpu()
    save_safetensors(out, tensors)
    if folder:
        save_folder(folder, model, scaled)


if __name__ == "__main__":
    variant = sys.argv[3] if len(sys.argv) > 3 else "plain"
    main(sys.argv[1], int(sys.argv[2]), variant == "llama3", sys.argv[4] if len(sys.argv) > 4 else None,
         "cuda" if variant == "cuda" else "cpu")
