// Public header. Checkpoints in the safetensors format (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the raw little-endian data. Files are interchangeable with PyTorch's `safetensors`.
//
//   nabla::save_safetensors("model.safetensors", {{"w", w}, {"b", b}}, {{"epoch", "3"}});
//   auto [tensors, metadata] = nabla::load_safetensors("model.safetensors", nabla::Device::cuda(0));
//
// Writes are atomic (temp file, fsync, rename, fsync of the directory), so a crash never leaves
// a torn checkpoint. The reader validates every field and rejects bad files with a nabla::Error
// naming the file and the problem; it never trusts sizes from the file before checking them.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>

#include "nabla/core/device.h"
#include "nabla/core/tensor.h"

namespace nabla {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Writes the tensors (in key order, each stored contiguous; CUDA tensors are copied to the host).
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a file written by save_safetensors or by any other safetensors writer.
SafetensorsFile load_safetensors(const std::string& path, Device device = Device::cpu());

// A checkpoint as Hugging Face stores one: `path` is a .safetensors file, a
// model.safetensors.index.json (whose "weight_map" names the shard file, beside it, of each
// tensor), or a folder holding either (the index first). Every shard the index names is read;
// each named tensor must be in its shard. A shard that is not there, an index that is not JSON
// or has no weight_map, and a tensor missing from its shard are errors naming the file and key.
// Tensors a shard holds beyond the index's are left out. Metadata comes from the first shard.
SafetensorsFile load_safetensors_checkpoint(const std::string& path, Device device = Device::cpu());

// The tensor -> shard file map of a model.safetensors.index.json's text (`name` goes into errors):
// every shard a plain file name beside the index.
std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& name);

// Parses an in-memory file image into CPU tensors. `name` goes into error messages. Used by
// load_safetensors and by the fuzz target.
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& name = "<memory>");

// Serializes to an in-memory file image (what save_safetensors writes).
std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

}  // namespace nabla
