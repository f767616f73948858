// Byte-level text for the examples' language models (train_gpt, train_llama): every byte a token
// (vocabulary 256), read from one file or every file of a folder.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace examples {

// The bytes of a text file, or of every file in a directory in name order (fortune's index files
// *.dat and the *.u8 copies left out), as byte-level tokens.
inline std::vector<uint32_t> read_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path)) {
      const auto ext = e.path().extension();
      if (e.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::vector<uint32_t> tokens;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + f.string());
    for (char c; in.get(c);) tokens.push_back(static_cast<uint8_t>(c));
  }
  if (tokens.size() < 2) throw std::runtime_error("no text under " + path);
  return tokens;
}

}  // namespace examples
