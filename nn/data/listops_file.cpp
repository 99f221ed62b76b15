// Reading and writing ListOps TSV files, validating every line read.
#include "nn/data/listops_file.h"

#include <fstream>
#include <string>
#include <system_error>

#include "core/error.h"
#include "nn/io/atomic_file.h"

namespace fs = std::filesystem;

namespace tinyformer::nn::data {

void write_listops_tsv(const fs::path& path, const std::vector<ListOpsExample>& examples) {
  for (std::size_t i = 0; i < examples.size(); ++i) {
    TF_CHECK(examples[i].label >= 0 && examples[i].label <= 9, "write_listops_tsv: example ", i,
             " has label ", examples[i].label, ", expected 0..9");
  }
  AtomicFile file(path.string(), "write_listops_tsv: " + path.string());
  file.write("Source\tTarget\n");
  for (const ListOpsExample& e : examples) {
    file.write(format_listops(e.tokens) + '\t' + std::to_string(e.label) + '\n');
  }
  file.commit();
}

std::vector<ListOpsExample> read_listops_tsv(const fs::path& path) {
  std::error_code ec;
  TF_CHECK(fs::is_regular_file(path, ec), "read_listops_tsv: '", path.string(),
           "' is not an existing file; generate one with write_listops_tsv");
  std::ifstream in(path, std::ios::binary);
  TF_CHECK(in.is_open(), "read_listops_tsv: cannot open '", path.string(),
           "' for reading (permissions?)");

  std::vector<ListOpsExample> examples;
  std::string line;
  std::int64_t number = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where =
        detail::concat("read_listops_tsv: '", path.string(), "' line ", number, ": ");
    if (!header) {
      TF_CHECK(line == "Source\tTarget", where, "expected the header 'Source<TAB>Target'");
      header = true;
      continue;
    }
    const auto tab = line.find('\t');
    TF_CHECK(tab != std::string::npos && line.find('\t', tab + 1) == std::string::npos, where,
             "expected two tab-separated fields (expression, value)");
    const std::string target = line.substr(tab + 1);
    TF_CHECK(target.size() == 1 && target[0] >= '0' && target[0] <= '9', where, "the value '",
             target.substr(0, 20), "' is not a digit 0..9");
    ListOpsExample e;
    e.label = target[0] - '0';
    std::int64_t value = -1;
    try {
      e.tokens = parse_listops(std::string_view(line).substr(0, tab));
      value = evaluate_listops(e.tokens);
    } catch (const Error& error) {
      fail(where, error.what());
    }
    TF_CHECK(value == e.label, where, "the value column says ", e.label,
             " but the expression evaluates to ", value);
    examples.push_back(std::move(e));
  }
  TF_CHECK(!in.bad(), "read_listops_tsv: reading '", path.string(), "' failed (I/O error)");
  TF_CHECK(header, "read_listops_tsv: '", path.string(),
           "' is empty; expected a 'Source<TAB>Target' header and examples");
  return examples;
}

}  // namespace tinyformer::nn::data
