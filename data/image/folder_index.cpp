// Directory walk in torchvision's order, and Note [Folder index cache]; see folder_index.h.
#include "nabla/data/image/folder_index.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <utility>

#include "nabla/core/error.h"
#include "nabla/core/logging.h"

namespace nabla::data {
namespace {

constexpr const char* kCacheMagic = "nabla-image-folder-index 1";

struct Entry {
  std::string name;
  bool is_dir;
};

struct DirStamp {
  std::string path;  // relative to root ("" is root itself)
  int64_t mtime_ns;
};

std::string join(const std::string& a, const std::string& b) {
  return a.empty() ? b : a + "/" + b;
}

bool stat_path(const std::string& path, struct stat& st) {
  return ::stat(path.c_str(), &st) == 0;
}

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// Reads one directory. d_type avoids a stat per file; symlinks and unknown types are stat'ed,
// following links as torchvision's os.walk(followlinks=True) does.
std::vector<Entry> list_dir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  NABLA_CHECK(dir != nullptr, "cannot open directory '{}'", path);
  std::vector<Entry> entries;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st {};
      std::string full = path;
      full += '/';
      full += name;
      is_dir = stat_path(full, st) && S_ISDIR(st.st_mode);
    }
    entries.push_back({std::move(name), is_dir});
  }
  ::closedir(dir);
  return entries;
}

bool has_extension(const std::string& name, const std::vector<std::string>& extensions) {
  for (const auto& ext : extensions) {
    if (name.size() < ext.size()) continue;
    bool match = std::equal(ext.begin(), ext.end(), name.end() - static_cast<std::ptrdiff_t>(ext.size()),
                            [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
    if (match) return true;
  }
  return false;
}

// Walks one class directory: directories sorted by path, then each one's files sorted by name.
void walk_class(const std::string& root, const std::string& class_dir, int32_t label,
                const FolderIndexOptions& options, FolderIndex& index, std::vector<DirStamp>& stamps) {
  std::vector<std::pair<std::string, std::vector<std::string>>> dirs;  // (relative dir, files)
  std::vector<std::string> pending = {class_dir};
  std::set<std::pair<dev_t, ino_t>> seen;  // symlink loops would walk forever
  while (!pending.empty()) {
    std::string rel = std::move(pending.back());
    pending.pop_back();
    struct stat st {};
    if (!stat_path(join(root, rel), st) || !seen.insert({st.st_dev, st.st_ino}).second) continue;
    stamps.push_back({rel, mtime_ns(st)});
    std::vector<std::string> files;
    for (auto& entry : list_dir(join(root, rel))) {
      if (entry.is_dir) {
        pending.push_back(join(rel, entry.name));
      } else if (has_extension(entry.name, options.extensions)) {
        files.push_back(std::move(entry.name));
      }
    }
    std::sort(files.begin(), files.end());
    dirs.emplace_back(rel, std::move(files));
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& [rel, files] : dirs) {
    for (const auto& file : files) {
      index.files.push_back(join(rel, file));
      index.labels.push_back(label);
    }
  }
}

std::string extensions_key(const FolderIndexOptions& options) {
  std::string key;
  for (const auto& e : options.extensions) key += e + " ";
  return key;
}

// Returns true and fills `index` when the cache exists, is for this root and these extensions,
// and every directory it walked still has the same mtime.
bool read_cache(const std::string& root, const FolderIndexOptions& options, FolderIndex& index) {
  std::ifstream in(options.cache_path);
  if (!in) return false;
  std::string line, cached_root, cached_ext;
  if (!std::getline(in, line) || line != kCacheMagic) return false;
  if (!std::getline(in, cached_root) || cached_root != root) return false;
  if (!std::getline(in, cached_ext) || cached_ext != extensions_key(options)) return false;
  size_t num_dirs = 0, num_classes = 0, num_files = 0;
  if (!(in >> num_dirs)) return false;
  for (size_t i = 0; i < num_dirs; ++i) {
    int64_t mtime = 0;
    std::string rel;
    if (!(in >> mtime) || in.get() != ' ' || !std::getline(in, rel)) return false;
    if (rel == ".") rel.clear();
    struct stat st {};
    if (!stat_path(join(root, rel), st) || mtime_ns(st) != mtime) return false;
  }
  FolderIndex cached;
  if (!(in >> num_classes) || !std::getline(in, line)) return false;
  cached.classes.resize(num_classes);
  for (auto& name : cached.classes) {
    if (!std::getline(in, name)) return false;
  }
  if (!(in >> num_files)) return false;
  cached.files.resize(num_files);
  cached.labels.resize(num_files);
  for (size_t i = 0; i < num_files; ++i) {
    if (!(in >> cached.labels[i]) || in.get() != ' ' || !std::getline(in, cached.files[i])) return false;
    if (cached.labels[i] < 0 || static_cast<size_t>(cached.labels[i]) >= num_classes) return false;
  }
  cached.from_cache = true;
  index = std::move(cached);
  return true;
}

// Writes the cache atomically (temporary file, then rename). Failing to write it is not an error:
// the index is still correct, only the next start is slower.
void write_cache(const std::string& root, const FolderIndexOptions& options, const FolderIndex& index,
                 const std::vector<DirStamp>& stamps) {
  auto has_newline = [](const std::string& s) { return s.find('\n') != std::string::npos; };
  if (has_newline(root) || std::any_of(index.files.begin(), index.files.end(), has_newline) ||
      std::any_of(index.classes.begin(), index.classes.end(), has_newline)) {
    return;  // one name per line cannot hold these; stay correct by not caching
  }
  std::string tmp = options.cache_path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kCacheMagic << "\n" << root << "\n" << extensions_key(options) << "\n" << stamps.size() << "\n";
    for (const auto& s : stamps) out << s.mtime_ns << " " << (s.path.empty() ? "." : s.path) << "\n";
    out << index.classes.size() << "\n";
    for (const auto& c : index.classes) out << c << "\n";
    out << index.files.size() << "\n";
    for (size_t i = 0; i < index.files.size(); ++i) out << index.labels[i] << " " << index.files[i] << "\n";
    if (!out.flush()) {
      std::remove(tmp.c_str());
      NABLA_LOG_WARN("cannot write the image folder index cache '{}'", options.cache_path);
      return;
    }
  }
  if (std::rename(tmp.c_str(), options.cache_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    NABLA_LOG_WARN("cannot write the image folder index cache '{}'", options.cache_path);
  }
}

}  // namespace

FolderIndex index_image_folder(const std::string& root, const FolderIndexOptions& options) {
  struct stat st {};
  NABLA_CHECK(stat_path(root, st), "image folder '{}' does not exist", root);
  NABLA_CHECK(S_ISDIR(st.st_mode), "image folder '{}' is not a directory", root);
  FolderIndex index;
  if (!options.cache_path.empty() && read_cache(root, options, index)) return index;

  std::vector<DirStamp> stamps = {{"", mtime_ns(st)}};
  for (auto& entry : list_dir(root)) {
    if (entry.is_dir) index.classes.push_back(std::move(entry.name));
  }
  NABLA_CHECK(!index.classes.empty(),
              "image folder '{}' has no class directories; expected the layout root/<class>/<image>", root);
  std::sort(index.classes.begin(), index.classes.end());
  std::vector<std::string> empty;
  for (size_t label = 0; label < index.classes.size(); ++label) {
    size_t before = index.files.size();
    walk_class(root, index.classes[label], static_cast<int32_t>(label), options, index, stamps);
    if (index.files.size() == before) empty.push_back(index.classes[label]);
  }
  if (!empty.empty()) {
    std::string names;
    for (size_t i = 0; i < empty.size() && i < 10; ++i) names += (i ? ", " : "") + empty[i];
    NABLA_CHECK(false, "image folder '{}': no image files (extensions {}) in {} class director{}: {}{}", root,
                extensions_key(options), empty.size(), empty.size() == 1 ? "y" : "ies", names,
                empty.size() > 10 ? ", ..." : "");
  }
  if (!options.cache_path.empty()) write_cache(root, options, index, stamps);
  return index;
}

}  // namespace nabla::data
