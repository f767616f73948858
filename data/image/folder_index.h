// Public header. The file list of an ImageFolder (root/<class>/**/<image>), in torchvision's
// order, with an optional on-disk cache so that a million-file folder is listed once.
//
// Order (matches torchvision.datasets.ImageFolder, so class indices and sample indices agree):
//   - classes: the sorted names of root's sub-directories (symlinks followed);
//   - samples: for each class in that order, its directory tree walked with the directories
//     sorted by path and the files of each directory sorted by name; a file is kept when its
//     name ends, case-insensitively, in one of the extensions.
// Sorting is by bytes, which is Python's code-point order for UTF-8 names.
//
// Cache (Note [Folder index cache]): a text file at a path the user chooses, holding the index and
// the modification time (ns) of every directory it walked. Adding, removing or renaming a file or
// a class changes its directory's mtime, so a cache is used only while all of them are
// unchanged; one stat per directory (about 1,000 for ImageNet) replaces reading 1.28M entries.
// The cache must live outside `root`, or writing it would change root's mtime.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nabla::data {

struct FolderIndexOptions {
  // Lower-case, with the dot. torchvision accepts more (.bmp, .tif, ...), which we cannot decode.
  std::vector<std::string> extensions = {".jpg", ".jpeg", ".png"};
  std::string cache_path;  // empty: no cache
};

struct FolderIndex {
  std::vector<std::string> classes;  // sorted class (directory) names; the label is the position
  std::vector<std::string> files;    // paths relative to root, e.g. "n01440764/n01440764_10026.JPEG"
  std::vector<int32_t> labels;       // one per file
  bool from_cache = false;           // whether this index was read from the cache
};

// Lists root. Throws nabla::Error when root is missing or not a directory, has no class
// directories, or a class has no image files (torchvision raises for the same cases).
FolderIndex index_image_folder(const std::string& root, const FolderIndexOptions& options = {});

}  // namespace nabla::data
