// check_agreement: rank 0's settings, broadcast as text, against each process's own.
#include "nn/distributed/agreement.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "nn/distributed/distributed.h"

namespace tinyformer::distributed {

namespace {

constexpr std::size_t kShownLength = 80;

// "<length>:<bytes>" for each name and value: any byte may appear in either.
std::string encode(const Settings& settings) {
  std::string out;
  for (const auto& [name, value] : settings) {
    for (const std::string* part : {&name, &value}) {
      out += std::to_string(part->size());
      out += ':';
      out += *part;
    }
  }
  return out;
}

// The inverse of encode; none for text that encode did not write.
std::optional<Settings> decode(std::string_view text) {
  Settings settings;
  auto next = [&text]() -> std::optional<std::string> {
    const std::size_t colon = text.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon > 18) return std::nullopt;
    std::size_t length = 0;
    for (const char c : text.substr(0, colon)) {
      if (c < '0' || c > '9') return std::nullopt;
      length = length * 10 + static_cast<std::size_t>(c - '0');
    }
    if (length > text.size() - colon - 1) return std::nullopt;
    std::string part(text.substr(colon + 1, length));
    text.remove_prefix(colon + 1 + length);
    return part;
  };
  while (!text.empty()) {
    std::optional<std::string> name = next();
    std::optional<std::string> value = name ? next() : std::nullopt;
    if (!value) return std::nullopt;
    settings[*name] = *value;
  }
  return settings;
}

// A value on one line, cut to kShownLength characters.
std::string shown(const std::string* value) {
  if (value == nullptr) return "not set";
  std::string text = value->size() > kShownLength ? value->substr(0, kShownLength) + "..." : *value;
  std::replace_if(
      text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return text;
}

// The first name whose values differ, as "<name> is <rank 0's> on rank 0 but <own> on rank R";
// empty when none does.
std::string first_difference(const Settings& root, const Settings& own, int rank) {
  auto r = root.begin();
  auto o = own.begin();
  while (r != root.end() || o != own.end()) {
    const std::string* root_value = nullptr;
    const std::string* own_value = nullptr;
    std::string name;
    if (o == own.end() || (r != root.end() && r->first < o->first)) {
      name = r->first;
      root_value = &(r++)->second;
    } else if (r == root.end() || o->first < r->first) {
      name = o->first;
      own_value = &(o++)->second;
    } else {
      name = r->first;
      root_value = &(r++)->second;
      own_value = &(o++)->second;
      if (*root_value == *own_value) continue;
    }
    return name + " is " + shown(root_value) + " on rank 0 but " + shown(own_value) + " on rank " +
           std::to_string(rank);
  }
  return {};
}

}  // namespace

void check_agreement(const Settings& settings) {
  const int size = world_size();
  if (size == 1) return;
  const int me = rank();
  const std::string root_text = broadcast_string(me == 0 ? encode(settings) : std::string(), 0);
  std::string difference;
  if (me != 0) {
    const std::optional<Settings> root = decode(root_text);
    difference = root ? first_difference(*root, settings, me)
                      : "rank 0 sent settings that rank " + std::to_string(me) +
                            " cannot read (another build of the program?)";
  }
  // Every process learns whether any differs, and the lowest one's difference.
  const auto first = static_cast<int>(all_reduce_min(difference.empty() ? size : me));
  if (first == size) return;
  const std::string reported = broadcast_string(difference, first);
  fail("the processes of this job were started differently: ", reported,
       "; start every process with the same flags and data");
}

}  // namespace tinyformer::distributed
