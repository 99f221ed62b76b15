// safetensors headers whose shapes are too large for a tensor, and the dtypes the loader names:
// each is an Error naming the file and what is wrong, never a wrapped size.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
namespace fs = std::filesystem;

namespace {

// A safetensors file of one header and no data, in a temporary directory removed at the end.
struct HeaderFile {
  fs::path path;
  explicit HeaderFile(const std::string& header) {
    path = fs::temp_directory_path() /
           ("tinyformer_sizes_" + std::to_string(::getpid()) + ".safetensors");
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    bytes += header;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~HeaderFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

std::string load_error(const std::string& header) {
  const HeaderFile file(header);
  try {
    nn::load_safetensors(file.path.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("safetensors: a shape too large for a tensor is refused, even one of 0 bytes") {
  // [0, 2^32, 2^32] holds no byte, so the byte count alone let it through to empty(), whose
  // contiguous strides then overflowed.
  const std::string zero =
      load_error(R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})");
  INFO(zero);
  CHECK(contains(zero, "tensor \"a\": the shape [0,4294967296,4294967296] is too large"));
  CHECK(contains(zero, "load_safetensors: "));
  // The largest such shape that fits loads as an empty tensor.
  const HeaderFile fits(
      R"({"a":{"dtype":"F32","shape":[0,2147483648,2147483648],"data_offsets":[0,0]}})");
  const nn::SafetensorsFile loaded = nn::load_safetensors(fits.path.string());
  REQUIRE(loaded.tensors.size() == 1);
  CHECK(loaded.tensors[0].second.shape() == Shape{0, std::int64_t{1} << 31, std::int64_t{1} << 31});
  CHECK(loaded.tensors[0].second.numel() == 0);
  // Sizes whose byte count overflows, and a size above the int64 range.
  CHECK(contains(
      load_error(R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})"),
      "is too large"));
  CHECK(contains(
      load_error(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})"),
      "is too large"));
}

TEST_CASE("safetensors: an unsupported dtype's message lists every dtype the loader reads") {
  const std::string message =
      load_error(R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})");
  INFO(message);
  CHECK(contains(message, "unsupported dtype \"F16\" (expected F32, F64, I64, BOOL or BF16)"));
}
