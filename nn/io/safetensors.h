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
//
// Integrity: safetensors itself carries no checksum, so a flipped bit inside tensor data would
// load silently. save_safetensors adds, for each tensor, the metadata entry
//   "tinyformer.fnv1a64.<name>": 16 lowercase hex digits, the 64-bit FNV-1a hash of its bytes,
// and load_safetensors verifies every such entry (and that a file with any of them has one for
// every tensor) before returning; these entries are not part of the returned metadata. A file
// with none of them (written by another tool) loads unchecked.
//
// Paths: only regular files are read or replaced. Loading refuses a FIFO, a device, a socket or
// a directory without blocking on it. Saving follows nn::AtomicFile's rules (nn/io/atomic_file.h):
// a symbolic link's target is replaced and the link stays, anything but a regular file or a
// missing path is refused, the replaced file's mode (and owner, where allowed) is kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "nn/io/atomic_file.h"  // AtomicFile, check_file_path
#include "nn/module.h"

namespace tinyformer::nn {

using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  StateDict tensors;  // in the order of their data in the file
  Metadata metadata;
};

// Writes the file atomically (nn::AtomicFile): a reader sees the old file or the new one, never
// a partial file, even if the process dies mid-save. Tensors may live on any device and have any
// layout. Metadata keys starting with "tinyformer.fnv1a64." are reserved.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const Metadata& metadata = {});

// Reads and checks everything (header length, JSON, dtypes, shapes against byte counts,
// offsets, duplicate names, boolean bytes, checksums) before returning; any problem is an
// Error naming the file and what is wrong. Tensors land on the CPU.
SafetensorsFile load_safetensors(const std::string& path);

// The 64-bit FNV-1a hash of `bytes` bytes, as the checksums above use it.
std::uint64_t fnv1a64(const void* data, std::size_t bytes,
                      std::uint64_t hash = 0xcbf29ce484222325ULL);

}  // namespace tinyformer::nn
