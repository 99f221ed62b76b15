// Outputs that would destroy inputs: a check, made before any work, that no file a program writes
// is a file it reads or another file it writes, by file identity rather than by name.
//
//   nn::check_outputs_distinct({{"--data", data}},
//                              {{"--checkpoint", checkpoint}, {"--log", log}, {"--plot", png}});
#pragma once

#include <string>
#include <vector>

namespace tinyformer::nn {

// A path and the flag (or the role, for messages) that named it: {"--data", "book.txt"}.
struct NamedPath {
  std::string flag;
  std::string path;
};

// An Error (one line naming both flags and the paths) when an output is the same file as an
// input or as another output, or lies inside an input that is a directory (a file written there
// would replace one of its files or join them the next time they are read). Paths are compared
// by identity: an existing path by the device and inode it leads to, symbolic links followed (so
// "d.txt", "./d.txt", a link to it and a hard link of it are one file); a path that does not
// exist yet by its nearest existing directory's identity and the names below it. Empty paths
// (an output not asked for) are skipped. Writes nothing.
void check_outputs_distinct(const std::vector<NamedPath>& inputs,
                            const std::vector<NamedPath>& outputs);

}  // namespace tinyformer::nn
