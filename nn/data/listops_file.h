// ListOps files in LRA's TSV layout: a "Source\tTarget" header, then one "expression\tvalue"
// line per example with the expression's tokens space-separated.
#pragma once

#include <filesystem>
#include <vector>

#include "nn/data/listops.h"

namespace tinyformer::nn::data {

// Writes through nn::AtomicFile (nn/io/atomic_file.h): an interrupted write leaves no half file
// under `path`, and only a regular file or a missing path is replaced.
void write_listops_tsv(const std::filesystem::path& path,
                       const std::vector<ListOpsExample>& examples);

// Reads and validates every line: two tab-separated fields, a well-formed expression, a label
// 0..9 equal to the expression's value. Blank lines are skipped, "\r\n" endings and LRA's
// parentheses accepted. A bad line gives an Error naming the file and the line number.
std::vector<ListOpsExample> read_listops_tsv(const std::filesystem::path& path);

}  // namespace tinyformer::nn::data
