// safetensors reading and writing (atomic save, fully validated load) and model + optimizer
// checkpoints built on it.
#include "nn/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "nn/io/atomic_file.h"

namespace tinyformer::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian bytes; this reader copies them as they are");

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Far above any real header (a few hundred bytes per tensor), low enough that a corrupted length
// cannot make us allocate gigabytes. Python's safetensors uses the same cap.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// The metadata key of a tensor's checksum is this prefix and the tensor's name.
constexpr std::string_view kChecksumPrefix = "tinyformer.fnv1a64.";

std::string hex64(std::uint64_t value) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(value));
  return out;
}

// 16 lowercase hex digits, nothing else.
bool parse_hex64(const std::string& text, std::uint64_t& value) {
  if (text.size() != 16) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  return ec == std::errc() && end == text.data() + text.size();
}

// The safetensors name of every dtype we read and write (and the list an error message gives).
constexpr std::pair<DType, const char*> kDTypeNames[] = {{DType::float32, "F32"},
                                                         {DType::float64, "F64"},
                                                         {DType::int64, "I64"},
                                                         {DType::boolean, "BOOL"},
                                                         {DType::bfloat16, "BF16"}};

const char* safetensors_dtype(DType dtype) {
  for (const auto& [d, name] : kDTypeNames) {
    if (d == dtype) return name;
  }
  fail("safetensors: unknown dtype ", static_cast<int>(dtype));
}

bool parse_dtype(const std::string& name, DType& dtype) {
  for (const auto& [d, n] : kDTypeNames) {
    if (name == n) {
      dtype = d;
      return true;
    }
  }
  return false;
}

// "F32, F64, I64, BOOL or BF16"
std::string dtype_names() {
  std::string names;
  const std::size_t n = std::size(kDTypeNames);
  for (std::size_t i = 0; i < n; ++i) {
    names += (i == 0 ? "" : i + 1 == n ? " or " : ", ");
    names += kDTypeNames[i].second;
  }
  return names;
}

std::string errno_text() {
  return std::strerror(errno);
}

// A file descriptor closed on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `bytes` at `offset`; a short read means the file changed or ended early.
void read_all(int fd, void* data, std::size_t bytes, std::uint64_t offset,
              const std::string& where) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    TF_CHECK(n >= 0, where, ": read failed: ", errno_text());
    TF_CHECK(n > 0, where, ": the file ended early at byte ", offset,
             " (was it modified while being read?)");
    p += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

// Writes `header` and the tensors' bytes to `path` through an AtomicFile.
void write_atomically(const std::string& path, const std::string& header,
                      const std::vector<Tensor>& host, const std::string& where) {
  AtomicFile file(path, where);
  const std::uint64_t n = header.size();
  unsigned char length[8];
  std::memcpy(length, &n, 8);  // little-endian (asserted above)
  file.write(length, 8);
  file.write(header);
  for (const Tensor& t : host) {
    file.write(t.data_ptr(), static_cast<std::size_t>(t.numel()) * element_size(t.dtype()));
  }
  file.commit();
}

// Parses the header, rejecting duplicate names (which a plain parse would silently merge) and
// nesting deeper than a safetensors header has (root object -> entry -> shape array).
json parse_header(const std::string& text, const std::string& where) {
  std::vector<std::set<std::string>> open_objects;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        TF_CHECK(depth <= 2, where,
                 ": the header nests objects or arrays deeper than a safetensors header does");
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        TF_CHECK(open_objects.back().insert(parsed.get<std::string>()).second, where,
                 ": the header names \"", parsed.get<std::string>(), "\" twice");
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, callback);
  } catch (const json::exception& e) {
    fail(where, ": the header is not valid JSON (", e.what(), ")");
  }
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin;
  std::uint64_t end;
};

std::uint64_t unsigned_at(const json& value, const std::string& where, const std::string& what) {
  TF_CHECK(value.is_number_unsigned(), where, ": ", what, " must be a non-negative integer, got ",
           value.dump());
  return value.get<std::uint64_t>();
}

// Checks one tensor entry of the header against the data section's size.
Entry parse_entry(const std::string& name, const json& value, std::uint64_t data_bytes,
                  const std::string& where) {
  const std::string what = "tensor \"" + name + "\"";
  TF_CHECK(!name.empty(), where, ": a tensor has an empty name");
  TF_CHECK(value.is_object(), where, ": ", what, " must be a JSON object, got ", value.dump());
  for (const auto& [field, ignored] : value.items()) {
    TF_CHECK(field == "dtype" || field == "shape" || field == "data_offsets", where, ": ", what,
             " has an unknown field \"", field, "\"");
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    TF_CHECK(value.contains(field), where, ": ", what, " has no \"", field, "\"");
  }
  Entry e{.name = name, .dtype = DType::float32, .shape = {}, .begin = 0, .end = 0};

  const json& dtype = value["dtype"];
  TF_CHECK(dtype.is_string(), where, ": ", what, ": dtype must be a string, got ", dtype.dump());
  TF_CHECK(parse_dtype(dtype.get<std::string>(), e.dtype), where, ": ", what,
           ": unsupported dtype ", dtype.dump(), " (expected ", dtype_names(), ")");

  const json& shape = value["shape"];
  TF_CHECK(shape.is_array(), where, ": ", what, ": shape must be an array, got ", shape.dump());
  // The shape must be one a tensor can have (core/shape.h): the product of its sizes with
  // zeros counted as 1 fits in an int64, so that [0, 2^32, 2^32], which holds no byte, is
  // refused too (its strides would overflow), and so must its byte size.
  std::int64_t extent = 1, bytes = static_cast<std::int64_t>(element_size(e.dtype));
  for (const json& d : shape) {
    const std::uint64_t size = unsigned_at(d, where, what + ": each shape entry");
    const auto s = static_cast<std::int64_t>(size);
    TF_CHECK(size <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) &&
                 !mul_overflows(extent, std::max<std::int64_t>(s, 1), extent) &&
                 !mul_overflows(bytes, s, bytes),
             where, ": ", what, ": the shape ", shape.dump(), " is too large");
    e.shape.push_back(s);
  }

  const json& offsets = value["data_offsets"];
  TF_CHECK(offsets.is_array() && offsets.size() == 2, where, ": ", what,
           ": data_offsets must be [begin, end], got ", offsets.dump());
  e.begin = unsigned_at(offsets[0], where, what + ": data_offsets");
  e.end = unsigned_at(offsets[1], where, what + ": data_offsets");
  TF_CHECK(e.begin <= e.end && e.end <= data_bytes, where, ": ", what, ": data_offsets [", e.begin,
           ", ", e.end, "] lie outside the data section of ", data_bytes,
           " bytes (is the file truncated?)");
  TF_CHECK(e.end - e.begin == static_cast<std::uint64_t>(bytes), where, ": ", what, ": ",
           dtype.get<std::string>(), " ", shape.dump(), " needs ", bytes, " bytes, data_offsets [",
           e.begin, ", ", e.end, "] span ", e.end - e.begin);
  return e;
}

}  // namespace

std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ULL;
  return hash;
}

void save_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata) {
  const std::string where = "save_safetensors: " + path;
  std::set<std::string> names;
  std::vector<Tensor> host;
  for (const auto& [name, t] : tensors) {
    TF_CHECK(!name.empty(), where, ": a tensor has an empty name");
    TF_CHECK(name != "__metadata__", where, ": \"__metadata__\" is reserved, not a tensor name");
    TF_CHECK(names.insert(name).second, where, ": \"", name, "\" appears twice");
    TF_CHECK(t.defined(), where, ": \"", name, "\" is an undefined Tensor");
    // The bytes go out row-major from host memory.
    host.push_back(raw::contiguous(raw::to_device(t, Device::cpu())));
  }
  ordered_json meta = ordered_json::object();
  for (const auto& [key, value] : metadata) {
    TF_CHECK(key.rfind(kChecksumPrefix, 0) != 0, where, ": the metadata key \"", key,
             "\" is reserved for checksums");
    meta[key] = value;
  }
  for (std::size_t i = 0; i < host.size(); ++i) {
    const Tensor& h = host[i];
    const std::size_t bytes = static_cast<std::size_t>(h.numel()) * element_size(h.dtype());
    meta[std::string(kChecksumPrefix) + tensors[i].first] =
        hex64(fnv1a64(bytes > 0 ? h.data_ptr() : nullptr, bytes));
  }
  ordered_json header = ordered_json::object();
  if (!meta.empty()) header["__metadata__"] = std::move(meta);
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    const Tensor& h = host[i];
    const std::uint64_t bytes = static_cast<std::uint64_t>(h.numel()) * element_size(h.dtype());
    header[tensors[i].first] = {{"dtype", safetensors_dtype(h.dtype())},
                                {"shape", h.shape()},
                                {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    fail(where, ": a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned, as
  // Python's safetensors does.
  text.append((8 - text.size() % 8) % 8, ' ');
  write_atomically(path, text, host, where);
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string where = "load_safetensors: " + path;
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever; the type check
  // right after refuses it (and anything else that is not a regular file).
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  TF_CHECK(fd.get() >= 0, where, ": cannot open: ", errno_text());
  struct stat st {};
  TF_CHECK(::fstat(fd.get(), &st) == 0, where, ": cannot stat: ", errno_text());
  TF_CHECK(S_ISREG(st.st_mode), where, ": not a regular file but ", file_kind(st.st_mode));
  const std::uint64_t file_bytes = static_cast<std::uint64_t>(st.st_size);
  TF_CHECK(file_bytes >= 8, where, ": the file has ", file_bytes,
           " bytes, fewer than the 8 of the header length");

  unsigned char length[8];
  read_all(fd.get(), length, 8, 0, where);
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, length, 8);
  TF_CHECK(header_bytes <= file_bytes - 8, where, ": the header length says ", header_bytes,
           " bytes, but only ", file_bytes - 8, " bytes follow it");
  TF_CHECK(header_bytes <= kMaxHeaderBytes, where, ": the header length ", header_bytes,
           " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  TF_CHECK(header_bytes >= 2, where, ": the header length is ", header_bytes,
           ", too short for a JSON object");

  std::string text(header_bytes, '\0');
  read_all(fd.get(), text.data(), text.size(), 8, where);
  TF_CHECK(text[0] == '{', where, ": the header must start with '{'");
  const json header = parse_header(text, where);
  TF_CHECK(header.is_object(), where, ": the header must be a JSON object");

  const std::uint64_t data_start = 8 + header_bytes;
  const std::uint64_t data_bytes = file_bytes - data_start;
  SafetensorsFile out;
  std::vector<Entry> entries;
  std::map<std::string, std::uint64_t> checksums;  // by tensor name
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (value.is_null()) continue;
      TF_CHECK(value.is_object(), where, ": __metadata__ must be an object of strings, got ",
               value.dump());
      for (const auto& [key, text_value] : value.items()) {
        TF_CHECK(text_value.is_string(), where, ": __metadata__ \"", key,
                 "\" must be a string, got ", text_value.dump());
        if (key.rfind(kChecksumPrefix, 0) == 0) {
          std::uint64_t hash = 0;
          TF_CHECK(parse_hex64(text_value.get<std::string>(), hash), where, ": the checksum \"",
                   key, "\" must be 16 lowercase hex digits, got ", text_value.dump());
          checksums[key.substr(kChecksumPrefix.size())] = hash;
        } else {
          out.metadata[key] = text_value.get<std::string>();
        }
      }
      continue;
    }
    entries.push_back(parse_entry(name, value, data_bytes, where));
  }
  // Checksums are all or nothing: a file written here has one per tensor, one written by
  // another tool none.
  if (!checksums.empty()) {
    for (const Entry& e : entries) {
      TF_CHECK(checksums.count(e.name), where, ": tensor \"", e.name,
               "\" has no checksum while other tensors have one (the header is corrupted)");
    }
    for (const auto& checksum : checksums) {
      const std::string& name = checksum.first;
      TF_CHECK(std::any_of(entries.begin(), entries.end(),
                           [&](const Entry& e) { return e.name == name; }),
               where, ": a checksum names tensor \"", name,
               "\", which the file does not hold (the header is corrupted)");
    }
  }

  // The tensors must tile the data section exactly: in offset order, each starts where the
  // previous one ended, and the last ends at the end of the file.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    TF_CHECK(e.begin >= covered, where, ": tensor \"", e.name, "\" (bytes [", e.begin, ", ", e.end,
             ")) overlaps tensor \"", entries[i - 1].name, "\" (bytes [", entries[i - 1].begin,
             ", ", entries[i - 1].end, "))");
    TF_CHECK(e.begin == covered, where, ": bytes [", covered, ", ", e.begin,
             ") of the data section belong to no tensor (before \"", e.name, "\")");
    covered = e.end;
  }
  TF_CHECK(covered == data_bytes, where, ": the data section has ", data_bytes,
           " bytes but the tensors cover only ", covered);

  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, {.dtype = e.dtype});
    const std::size_t bytes = static_cast<std::size_t>(e.end - e.begin);
    if (bytes > 0) read_all(fd.get(), t.data_ptr(), bytes, data_start + e.begin, where);
    if (e.dtype == DType::boolean) {
      // Any byte but 0 and 1 would be a bool value with undefined behaviour.
      const auto* p = static_cast<const unsigned char*>(t.data_ptr());
      const auto bad = std::find_if(p, p + bytes, [](unsigned char b) { return b > 1; });
      TF_CHECK(bad == p + bytes, where, ": tensor \"", e.name, "\" is BOOL but element ", bad - p,
               " is ", static_cast<int>(*bad), " (expected 0 or 1)");
    }
    if (const auto it = checksums.find(e.name); it != checksums.end()) {
      const std::uint64_t hash = fnv1a64(bytes > 0 ? t.data_ptr() : nullptr, bytes);
      TF_CHECK(hash == it->second, where, ": tensor \"", e.name,
               "\": its data does not match its checksum (FNV-1a ", hex64(hash), ", expected ",
               hex64(it->second), "): the file is corrupted");
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace tinyformer::nn
