// Loading a text corpus (one file or a directory of files) into memory, and splitting it into a
// training and a validation part.
#pragma once

#include <cstddef>
#include <cstdint>
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

// A corpus split for training and validation file by file (train_mlm's --data).
struct SplitCorpus {
  TextSplit split;
  std::int64_t files = 0;  // the files read
  std::size_t bytes = 0;   // their bytes, before splitting
};

// A text file, or the plain-text files below a directory, with the last `validation_fraction`
// of each file (split_text) held out: the validation text then mixes the files as the training
// text does. Each file's parts start on a new line of their part. Below a directory, symbolic
// links, binary files (a NUL byte in the first 4 KiB), hidden and empty files are left out (a
// text directory often holds indexes and links beside its texts, as fortune's does), the rest
// read in sorted path order. Files of fewer than 2 bytes add to `bytes` only. Throws an Error
// naming the path when it is missing, empty, or a directory without text files.
SplitCorpus load_split_corpus(const std::filesystem::path& path, double validation_fraction);

// A fingerprint of a text (the 32-bit FNV-1a hash of its bytes as 8 hex digits): a checkpoint
// records its training text's, so that a run is not resumed or evaluated on another corpus.
std::string text_fingerprint(const std::string& text);

}  // namespace tinyformer::nn::data
