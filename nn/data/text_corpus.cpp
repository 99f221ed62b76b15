// load_text and split_text: a corpus from disk, split for training and validation.
#include "nn/data/text_corpus.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace fs = std::filesystem;

namespace tinyformer::nn::data {

namespace {
std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TF_CHECK(in.is_open(), "load_text: cannot open '", path.string(),
           "' for reading; check that it is a readable file (permissions)");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TF_CHECK(!in.bad(), "load_text: reading '", path.string(), "' failed (I/O error)");
  return text;
}

bool hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name[0] == '.';
}
}  // namespace

std::string load_text(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  TF_CHECK(!ec || ec == std::errc::no_such_file_or_directory, "load_text: cannot inspect '",
           path.string(), "': ", ec.message());
  TF_CHECK(fs::exists(status), "load_text: '", path.string(),
           "' does not exist; pass a text file or a directory of text files");

  if (fs::is_regular_file(status)) {
    std::string text = read_file(path);
    TF_CHECK(!text.empty(), "load_text: '", path.string(),
             "' is empty; pass a file that holds some text");
    return text;
  }
  TF_CHECK(fs::is_directory(status), "load_text: '", path.string(),
           "' is neither a regular file nor a directory");

  std::vector<fs::path> files;
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
  TF_CHECK(!ec, "load_text: cannot list directory '", path.string(), "': ", ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    TF_CHECK(!ec, "load_text: listing '", path.string(), "' failed: ", ec.message());
    if (hidden(it->path())) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());

  std::string text;
  for (const fs::path& file : files) {
    std::string part = read_file(file);
    if (part.empty()) continue;
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += part;
  }
  TF_CHECK(!text.empty(), "load_text: directory '", path.string(), "' holds no non-empty files (",
           files.size(), " files found); put some text files in it");
  return text;
}

TextSplit split_text(const std::string& text, double validation_fraction) {
  TF_CHECK(validation_fraction > 0.0 && validation_fraction < 1.0,
           "split_text: expected a validation fraction in (0, 1), got ", validation_fraction);
  TF_CHECK(text.size() >= 2, "split_text: a text of ", text.size(),
           " bytes cannot be split into two non-empty parts");
  const double size = static_cast<double>(text.size());
  std::size_t validation = static_cast<std::size_t>(std::llround(size * validation_fraction));
  validation = std::clamp<std::size_t>(validation, 1, text.size() - 1);
  const std::size_t train = text.size() - validation;
  return {text.substr(0, train), text.substr(train)};
}

namespace {

// Whether a file holds text: no NUL byte in its first 4 KiB.
bool is_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4096];
  in.read(head, sizeof head);
  return std::find(head, head + in.gcount(), '\0') == head + in.gcount();
}

// Adds `text` to `part`, starting on a new line.
void append(std::string& part, const std::string& text) {
  if (!part.empty() && part.back() != '\n') part += '\n';
  part += text;
}

}  // namespace

SplitCorpus load_split_corpus(const fs::path& path, double validation_fraction) {
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (auto it = fs::recursive_directory_iterator(path); it != fs::recursive_directory_iterator();
         ++it) {
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_symlink() || !it->is_regular_file() || it->file_size() == 0) continue;
      if (is_text_file(it->path())) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    TF_CHECK(!files.empty(), "load_split_corpus: the directory '", path.string(),
             "' holds no non-empty text files; pass a text file or a directory with some");
  } else {
    files.push_back(path);  // load_text reports a missing or empty file
  }
  SplitCorpus corpus;
  for (const fs::path& file : files) {
    const std::string text = load_text(file);
    corpus.bytes += text.size();
    ++corpus.files;
    if (text.size() < 2) continue;
    const TextSplit part = split_text(text, validation_fraction);
    append(corpus.split.train, part.train);
    append(corpus.split.validation, part.validation);
  }
  return corpus;
}

std::string text_fingerprint(const std::string& text) {
  std::uint32_t hash = 2166136261u;
  for (unsigned char c : text) hash = (hash ^ c) * 16777619u;
  char out[16];
  std::snprintf(out, sizeof out, "%08x", hash);
  return out;
}

}  // namespace tinyformer::nn::data
