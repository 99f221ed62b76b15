// check_outputs_distinct: outputs compared with inputs and with each other by file identity.
#include "nn/io/output_paths.h"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace tinyformer::nn {

namespace fs = std::filesystem;

namespace {

// What a path leads to: the device and inode of the file, or, for a path that does not exist
// yet, of its nearest existing directory plus the names below it ("runs/new/log.csv" with only
// "runs" there: runs' identity and "new/log.csv"), "." and ".." among those names resolved.
struct Identity {
  dev_t device = 0;
  ino_t inode = 0;
  std::string below;
  bool directory = false;  // an existing directory

  bool operator==(const Identity& other) const {
    return device == other.device && inode == other.inode && below == other.below;
  }
};

Identity identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return {st.st_dev, st.st_ino, "", S_ISDIR(st.st_mode)};
  fs::path current(path);
  std::string below;
  for (;;) {
    const std::string name = current.filename().string();
    if (!name.empty()) below = below.empty() ? name : name + "/" + below;
    fs::path parent = current.parent_path();
    if (parent.empty()) parent = ".";
    if (parent == current) break;
    if (::stat(parent.c_str(), &st) == 0) {
      // The missing directories will be made as plain directories, so "." and ".." below the
      // existing one resolve by name: "new/../d.txt" is "d.txt" there.
      const fs::path normal = fs::path(below).lexically_normal();
      if (!normal.empty() && *normal.begin() == "..") {
        return identity_of((parent / normal).lexically_normal().string());
      }
      if (normal.string() != below) return identity_of((parent / normal).string());
      return {st.st_dev, st.st_ino, below, false};
    }
    current = parent;
  }
  // No directory of it can be looked up (the working directory was removed): the name alone.
  std::error_code ec;
  return {0, 0, fs::absolute(path, ec).lexically_normal().string(), false};
}

// Whether `path` (existing or not) lies below the directory `dir`: one of the directories that
// contain it, symbolic links resolved, is `dir`.
bool lies_inside(const std::string& path, const Identity& dir) {
  std::error_code ec;
  fs::path current = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return false;
  while (current.has_relative_path()) {
    current = current.parent_path();
    struct stat st {};
    if (::stat(current.c_str(), &st) == 0 && st.st_dev == dir.device && st.st_ino == dir.inode) {
      return true;
    }
  }
  return false;
}

}  // namespace

void check_outputs_distinct(const std::vector<NamedPath>& inputs,
                            const std::vector<NamedPath>& outputs) {
  std::vector<std::pair<const NamedPath*, Identity>> in, out;
  for (const NamedPath& p : inputs) {
    if (!p.path.empty()) in.emplace_back(&p, identity_of(p.path));
  }
  for (const NamedPath& p : outputs) {
    if (!p.path.empty()) out.emplace_back(&p, identity_of(p.path));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    const NamedPath& o = *out[i].first;
    for (const auto& [input, identity] : in) {
      TF_CHECK(!(out[i].second == identity), o.flag, " ", o.path, " is the same file as ",
               input->flag, " ", input->path,
               ": writing it would destroy that input; choose another path");
      TF_CHECK(!identity.directory || !lies_inside(o.path, identity), o.flag, " ", o.path,
               " lies inside ", input->flag, " ", input->path,
               ", a directory that is read: the file would replace or join its files; write it "
               "elsewhere");
    }
    for (std::size_t j = 0; j < i; ++j) {
      const NamedPath& other = *out[j].first;
      TF_CHECK(!(out[i].second == out[j].second), other.flag, " ", other.path, " and ", o.flag, " ",
               o.path, " are the same file: one would overwrite the other; give each its own path");
    }
  }
}

}  // namespace tinyformer::nn
