// Checks that the figures a page quotes from a CSV file are the file's values, rounded as the
// page rounds them. A page lists what it quotes in HTML comments, invisible when rendered:
//
//   <!-- figures: tutorial_04_spectrum.csv %.3f
//   trained, layer 0 {trained_l0 index=1} {trained_l0 index=8} {trained_l0 index=16}
//   the first direction carries {untrained_l0 index=1 x100 %.0f}%
//   -->
//
// The comment opens a line. Its header names the CSV file (or a folder of them), relative to the
// page as its links are (README.md names results/table3/h200.csv, docs/performance.md
// ../results/table3/h200.csv), and the default printf format. Each further line is a piece of the
// page's text in which every {...} stands for a value of the file; the line, its values filled in,
// must occur in the page outside the comments (runs of white space, line breaks included, compare
// as one space). A value is
//
//   {COLUMN KEY=VALUE ...}        the column of the one row whose KEY columns read VALUE
//                                 (KEY=A,B: either); no KEY: the file's last row
//   {min COLUMN ...}, {max ...}   the least or greatest over the matching rows (no KEY: all)
//   {range COLUMN ...}            "MIN-MAX" over the matching rows, or the one value when both
//                                 round alike (a table's "1.25-1.27" beside its "0.93")
//   {each COLUMN ...}             every matching row, which must all round to the same text
//   ... COLUMN,COLUMN ...         the values of both columns (a range over a run and its
//                                 rerun); without min, max or range they must round alike
//   ... in FILE                   from FILE (relative to the header's folder) instead
//   ... abs                       the absolute value ({max abs ...}: "agree within")
//   ... x100                      times 100 (a percentage)
//   ... %.2f                      rounded with this format instead of the header's (f, g or e)
//
// Usage: check_figures PATH...; a PATH that is a folder checks every page in it and requires
// every CSV file in it to be quoted by one of them (a figure nobody reads is a figure that
// drifts unseen). Prints each disagreement, with what the page says instead, and exits 1 when
// there is one.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

int problems = 0;

void problem(const std::string& where, const std::string& what) {
  std::printf("%s: %s\n", where.c_str(), what.c_str());
  ++problems;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs of white space as one space, no space at either end.
std::string squeeze(const std::string& text) {
  std::string out;
  bool space = false;
  for (const char c : text) {
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      space = !out.empty();
    } else {
      if (space) out += ' ';
      out += c;
      space = false;
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

// A plain CSV file: a header row, then rows of as many comma-separated cells (no quoting).
std::optional<Csv> read_csv(const fs::path& path, const std::string& where) {
  static std::map<fs::path, Csv> cache;
  if (const auto it = cache.find(path); it != cache.end()) return it->second;
  std::ifstream in(path);
  if (!in) {
    problem(where, "cannot read " + path.string());
    return std::nullopt;
  }
  Csv csv;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto cells = split(line, ',');
    if (csv.header.empty()) {
      csv.header = cells;
    } else if (cells.size() != csv.header.size()) {
      problem(where, path.string() + ": a row of " + std::to_string(cells.size()) +
                         " cells under a header of " + std::to_string(csv.header.size()));
      return std::nullopt;
    } else {
      csv.rows.push_back(cells);
    }
  }
  if (csv.rows.empty()) {
    problem(where, path.string() + ": no rows");
    return std::nullopt;
  }
  return cache[path] = csv;
}

// Only %[.N]f, %[.N]g and %[.N]e: the formats the pages round with.
bool valid_format(const std::string& format) {
  static const std::regex allowed("%(\\.[0-9]{1,2})?[fge]");
  return std::regex_match(format, allowed);
}

std::string format_value(double value, const std::string& format) {
  char text[64];
  std::snprintf(text, sizeof text, format.c_str(), value);
  std::string out = text;
  if (out.rfind("-0", 0) == 0 && std::strtod(out.c_str(), nullptr) == 0.0) out.erase(0, 1);
  return out;
}

struct Block {
  fs::path base;                     // the folder FILE names are relative to
  std::optional<fs::path> csv_file;  // the header's file, when it names one
  std::string format;
};

// One {...}: its value as the page should print it, or nothing after reporting why not.
std::optional<std::string> evaluate(const std::string& spec, const Block& block,
                                    const std::string& where, std::set<fs::path>& used) {
  std::string aggregate = "one", columns, format = block.format;
  std::optional<fs::path> file = block.csv_file;
  std::vector<std::pair<std::string, std::vector<std::string>>> selectors;
  double scale = 1;
  bool absolute = false;
  std::istringstream in(spec);
  std::vector<std::string> tokens;
  for (std::string token; in >> token;) tokens.push_back(token);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    const auto equals = token.find('=');
    if (i == 0 && (token == "min" || token == "max" || token == "range" || token == "each")) {
      aggregate = token;
    } else if (token == "in" && i + 1 < tokens.size()) {
      file = block.base / tokens[++i];
    } else if (token == "abs") {
      absolute = true;
    } else if (token == "x100") {
      scale = 100;
    } else if (token.front() == '%') {
      format = token;
    } else if (equals != std::string::npos) {
      selectors.emplace_back(token.substr(0, equals), split(token.substr(equals + 1), ','));
    } else if (columns.empty()) {
      columns = token;
    } else {
      problem(where, "{" + spec + "}: what is \"" + token + "\"?");
      return std::nullopt;
    }
  }
  if (columns.empty() || !file) {
    problem(where, "{" + spec + "}: needs a column and a file (the header's, or \"in FILE\")");
    return std::nullopt;
  }
  if (!valid_format(format)) {
    problem(where,
            "{" + spec + "}: the format must be %f, %g or %e with a precision, not " + format);
    return std::nullopt;
  }
  const fs::path path = file->lexically_normal();
  used.insert(fs::weakly_canonical(path));
  const std::optional<Csv> csv = read_csv(path, where);
  if (!csv) return std::nullopt;
  auto index_of = [&](const std::string& name) -> std::optional<std::size_t> {
    const auto it = std::find(csv->header.begin(), csv->header.end(), name);
    if (it == csv->header.end()) {
      problem(where, path.string() + " has no column \"" + name + "\"");
      return std::nullopt;
    }
    return static_cast<std::size_t>(it - csv->header.begin());
  };
  std::vector<std::size_t> value_columns;
  for (const std::string& column : split(columns, ',')) {
    const auto value_column = index_of(column);
    if (!value_column) return std::nullopt;
    value_columns.push_back(*value_column);
  }
  std::vector<std::pair<std::size_t, std::vector<std::string>>> tests;
  for (const auto& [key, values] : selectors) {
    const auto key_column = index_of(key);
    if (!key_column) return std::nullopt;
    tests.emplace_back(*key_column, values);
  }
  std::vector<const std::vector<std::string>*> rows;
  if (tests.empty() && aggregate == "one") {
    rows.push_back(&csv->rows.back());
  } else {
    for (const auto& row : csv->rows) {
      const bool match = std::all_of(tests.begin(), tests.end(), [&](const auto& test) {
        return std::find(test.second.begin(), test.second.end(), row[test.first]) !=
               test.second.end();
      });
      if (match) rows.push_back(&row);
    }
  }
  if (rows.empty() || (aggregate == "one" && rows.size() != 1)) {
    problem(where, "{" + spec + "}: " + std::to_string(rows.size()) + " rows of " + path.string() +
                       " match, " + (aggregate == "one" ? "not one" : "none"));
    return std::nullopt;
  }
  std::vector<double> values;
  for (const auto* row : rows) {
    for (const std::size_t value_column : value_columns) {
      const std::string& cell = (*row)[value_column];
      char* end = nullptr;
      const double value = std::strtod(cell.c_str(), &end);
      if (cell.empty() || *end != '\0' || !std::isfinite(value)) {
        problem(where, "{" + spec + "}: \"" + cell + "\" in " + path.string() + " is not a number");
        return std::nullopt;
      }
      values.push_back((absolute ? std::fabs(value) : value) * scale);
    }
  }
  const auto [least, greatest] = std::minmax_element(values.begin(), values.end());
  if (aggregate == "min") return format_value(*least, format);
  if (aggregate == "max") return format_value(*greatest, format);
  if (aggregate == "range") {
    const std::string low = format_value(*least, format), high = format_value(*greatest, format);
    return low == high ? low : low + "-" + high;
  }
  const std::string first = format_value(values.front(), format);
  for (const double value : values) {
    if (format_value(value, format) != first) {
      problem(where, "{" + spec + "}: the matching rows differ (" + first + ", " +
                         format_value(value, format) + "): quote their range");
      return std::nullopt;
    }
  }
  return first;
}

// Whether `text` holds, at `at`, `length` characters that are the whole of their word or number:
// no letter or digit continues them at either edge, nor a decimal part after a final digit.
bool stands_alone(const std::string& text, std::size_t at, std::size_t length) {
  auto alnum = [&](std::size_t i) {
    return i < text.size() && std::isalnum(static_cast<unsigned char>(text[i])) != 0;
  };
  const std::size_t end = at + length;
  if (length == 0) return false;
  if (alnum(at) && at > 0 &&
      (alnum(at - 1) ||
       (std::isdigit(static_cast<unsigned char>(text[at])) && text[at - 1] == '.')))
    return false;
  if (alnum(end - 1) && (alnum(end) || (std::isdigit(static_cast<unsigned char>(text[end - 1])) &&
                                        end < text.size() && text[end] == '.' && alnum(end + 1))))
    return false;
  return true;
}

bool contains_figure(const std::string& text, const std::string& needle) {
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    if (stands_alone(text, at, needle.size())) return true;
  return false;
}

std::string regex_escape(const std::string& text) {
  static const std::string special = "\\^$.|?*+()[]{}";
  std::string out;
  for (const char c : text) {
    if (special.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// Checks one page; returns the number of figures checked.
int check_page(const fs::path& page, std::set<fs::path>& used) {
  const std::string text = read_file(page);
  // The page as a reader sees it: without its comments, white space squeezed.
  std::string visible;
  std::vector<std::string> comments;
  for (std::size_t at = 0;;) {
    const auto open = text.find("<!--", at);
    visible += text.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (open == std::string::npos) break;
    const auto close = text.find("-->", open + 4);
    if (close == std::string::npos) {
      problem(page.string(), "a comment that never closes");
      return 0;
    }
    // Only a comment that opens a line lists figures (an indented one is an example in code).
    if (open == 0 || text[open - 1] == '\n')
      comments.push_back(text.substr(open + 4, close - open - 4));
    at = close + 3;
    visible += ' ';
  }
  visible = squeeze(visible);
  int checked = 0;
  for (const std::string& comment : comments) {
    std::vector<std::string> lines = split(comment, '\n');
    const std::string header = squeeze(lines.front());
    if (header.rfind("figures:", 0) != 0) continue;
    std::istringstream words(header.substr(8));
    std::string target, format = "%.3f";
    words >> target >> format;
    Block block{.base = page.parent_path(), .csv_file = std::nullopt, .format = format};
    const fs::path target_path = page.parent_path() / target;
    if (target.empty() || !fs::exists(target_path)) {
      problem(
          page.string(),
          "figures: " + (target.empty() ? "no file" : target_path.string() + " does not exist"));
      continue;
    }
    if (fs::is_directory(target_path)) {
      block.base = target_path;
    } else {
      block.base = target_path.parent_path();
      block.csv_file = target_path;
    }
    for (std::size_t i = 1; i < lines.size(); ++i) {
      const std::string line = squeeze(lines[i]);
      if (line.empty()) continue;
      const std::string where = page.string() + ": \"" + line + "\"";
      std::string filled, pattern;
      std::vector<std::string> figures;
      bool ok = true;
      int values = 0;
      for (std::size_t at = 0;;) {
        const auto open = line.find('{', at);
        const std::string literal = line.substr(at, open == std::string::npos ? open : open - at);
        filled += literal;
        pattern += regex_escape(literal);
        if (open == std::string::npos) break;
        const auto close = line.find('}', open);
        if (close == std::string::npos) {
          problem(where, "a { without its }");
          ok = false;
          break;
        }
        const auto value = evaluate(line.substr(open + 1, close - open - 1), block, where, used);
        ok = ok && value.has_value();
        filled += value.value_or("?");
        figures.push_back(value.value_or("?"));
        pattern += "(-?[0-9]+(?:[.,][0-9]+)*(?:-[0-9]+(?:[.,][0-9]+)*)?)";  // a number or range
        ++values;
        at = close + 1;
      }
      if (!ok) continue;
      if (values == 0) {
        problem(where, "quotes no value");
        continue;
      }
      checked += values;
      if (contains_figure(visible, filled)) continue;
      // What the page says instead: the same text with other numbers; where several texts are
      // (a table's cells, which may share their edges), the one with most numbers of the data.
      const std::regex other(pattern);
      std::string says;
      std::size_t most_shared = 0;
      std::smatch match;
      for (auto from = visible.cbegin(); std::regex_search(from, visible.cend(), match, other);
           from = match[0].first + 1) {
        if (!stands_alone(visible, static_cast<std::size_t>(match[0].first - visible.cbegin()),
                          static_cast<std::size_t>(match.length())))
          continue;
        std::size_t shared = 0;
        for (std::size_t v = 0; v < figures.size(); ++v)
          if (match[v + 1].str() == figures[v]) ++shared;
        if (says.empty() || shared > most_shared) {
          says = match.str();
          most_shared = shared;
        }
      }
      if (!says.empty()) {
        problem(page.string(), "the page says \"" + says + "\", the data \"" + filled + "\"");
      } else {
        problem(page.string(),
                "\"" + filled + "\" is not in the page, nor this text with other numbers");
      }
    }
  }
  return checked;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: check_figures PAGE_OR_FOLDER...\n");
    return 2;
  }
  for (int a = 1; a < argc; ++a) {
    const fs::path path = argv[a];
    std::vector<fs::path> pages, csvs;
    if (fs::is_directory(path)) {
      for (const auto& entry : fs::directory_iterator(path)) {
        if (entry.path().extension() == ".md") pages.push_back(entry.path());
        if (entry.path().extension() == ".csv") csvs.push_back(entry.path());
      }
      std::sort(pages.begin(), pages.end());
    } else if (fs::exists(path)) {
      pages.push_back(path);
    } else {
      problem(path.string(), "does not exist");
    }
    std::set<fs::path> used;
    for (const fs::path& page : pages) {
      const int checked = check_page(page, used);
      if (checked > 0) std::printf("%s: %d figures checked\n", page.string().c_str(), checked);
    }
    for (const fs::path& csv : csvs) {
      if (used.count(fs::weakly_canonical(csv)) == 0)
        problem(csv.string(), "no page of " + path.string() + " quotes this file's figures");
    }
  }
  if (problems > 0) std::printf("%d problem(s)\n", problems);
  return problems > 0 ? 1 : 0;
}
