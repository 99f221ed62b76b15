// Loading a text corpus (one file or a directory of files) into memory, and splitting it into a
// training and a validation part.
#pragma once

#include <filesystem>
#include <string>

namespace tinyformer::nn::data {

// Reads `path` as bytes. For a directory, reads every regular file below it (recursively, in
// sorted path order so the result never depends on the file system, skipping names that start
// with '.' and empty files) and joins them, adding a '\n' between two files when the first does
// not end with one. Throws an Error naming the path when it does not exist, cannot be read, or
// holds no text (an empty file, a directory without non-empty files).
std::string load_text(const std::filesystem::path& path);

struct TextSplit {
  std::string train;
  std::string validation;
};

// The last `validation_fraction` of the text (rounded to whole bytes, at least one) is the
// validation part and the rest the training part: contiguous, as language-model corpora are
// usually split, so no document straddles both. Deterministic. Needs 0 < fraction < 1 and a text
// long enough for both parts to be non-empty.
TextSplit split_text(const std::string& text, double validation_fraction);

}  // namespace tinyformer::nn::data
