// The safetensors file format: tensors by name plus string metadata, written atomically and
// validated completely when read back (a file is untrusted input).
//
// The layout (https://github.com/huggingface/safetensors):
//   8 bytes    N, the header length, unsigned little-endian
//   N bytes    JSON: {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                     ..., "__metadata__": {"<key>": "<value>", ...}}
//   the rest   the tensors' bytes, row-major, little-endian; offsets count from the start of
//              this data section, and the tensors cover it exactly, in order, without gaps.
// dtypes F32, F64, I64, BOOL and BF16 map to float32, float64, int64, boolean and bfloat16.
// Files written here load with Python's safetensors and the other way round.
#pragma once

#include <map>
#include <string>

#include "nn/module.h"

namespace tinyformer::nn {

using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  StateDict tensors;  // in the order of their data in the file
  Metadata metadata;
};

// Writes "<path>.tmp.<pid>", flushes it to disk, renames it over `path` and syncs the
// directory: a reader sees the old file or the new one, never a partial file, even if the
// process dies mid-save. Tensors may live on any device and have any layout.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const Metadata& metadata = {});

// Reads and checks everything (header length, JSON, dtypes, shapes against byte counts,
// offsets, duplicate names, boolean bytes) before building a tensor; any problem is an Error
// naming the file and what is wrong. Tensors land on the CPU.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace tinyformer::nn
