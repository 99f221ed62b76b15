// safetensors files and checkpoints: round trips, the byte layout Python's safetensors writes,
// corrupted and truncated files, checkpoints of another configuration, and saves interrupted by
// SIGKILL.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
namespace fs = std::filesystem;
namespace optim = tinyformer::nn::optim;
using json = nlohmann::json;

namespace {

// A fresh directory per test case, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("tinyformer_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Removes the old file first: truncating one in place makes some filesystems (ext4) flush it on
// close, which turns the loops below from milliseconds into seconds.
void write_bytes(const std::string& path, const std::string& bytes) {
  fs::remove(path);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string u64_le(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a header text and raw data bytes.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

template <typename T>
std::string raw_of(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), values.data(), s.size());
  return s;
}

// Loads `path` and expects an Error whose message names the file and contains `needle`.
void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    nn::load_safetensors(path);
    FAIL("expected an Error containing \"", needle, "\"");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(needle) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
  }
}

// Same bytes (and dtype and shape): values compare exactly, NaNs included.
bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.numel() == 0) return true;
  const Tensor ca = raw::contiguous(a), cb = raw::contiguous(b);
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * element_size(ca.dtype())) == 0;
}

nn::EncoderConfig small_config() {
  return {.layers = 1,
          .d_model = 8,
          .heads = 2,
          .d_ff = 16,
          .max_seq_len = 8,
          .dropout = 0.0,
          .attention = nn::AttentionKind::linformer,
          .linformer = {.k = 4}};
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype, shapes and metadata") {
  TempDir dir;
  const std::string path = dir.file("all.safetensors");
  const Tensor f32 = from<float>({1.5f, -2.25f, 3e-38f, NAN, INFINITY, -0.0f}, {2, 3});
  const Tensor f64 = from<double>({3.141592653589793, -1e300, 5e-324, 0.1}, {4});
  const Tensor i64 = from<std::int64_t>({INT64_MIN, -1, 0, INT64_MAX}, {2, 1, 2});
  const Tensor b = from<bool>({true, false, true}, {3});
  const Tensor scalar = scalar_tensor(7.0, {.dtype = kFloat64});
  const Tensor empty0 = zeros({0, 5});
  const Tensor transposed = from<float>({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  const nn::StateDict state = {{"layer.f32", f32}, {"f64", f64},       {"ids", i64},
                               {"mask", b},        {"scalar", scalar}, {"empty", empty0},
                               {"t", transposed},  {"ünïcode ✓", f32}};
  const nn::Metadata meta = {
      {"step", "1200"}, {"note", "quotes \" and \\ and\nnewline"}, {"emoji", "🙂"}};
  nn::save_safetensors(path, state, meta);
  CHECK(!fs::exists(path + ".tmp." + std::to_string(::getpid())));

  const nn::SafetensorsFile file = nn::load_safetensors(path);
  CHECK(file.metadata == meta);
  REQUIRE(file.tensors.size() == state.size());
  for (std::size_t i = 0; i < state.size(); ++i) {
    INFO(state[i].first);
    CHECK(file.tensors[i].first == state[i].first);  // data order is the save order
    CHECK(same_tensor(file.tensors[i].second, state[i].second));
    CHECK(file.tensors[i].second.device() == Device::cpu());
  }
  CHECK(file.tensors[6].second.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});

  // Saving again replaces the file.
  nn::save_safetensors(path, {{"only", f64}});
  CHECK(nn::load_safetensors(path).tensors.size() == 1);
  CHECK(nn::load_safetensors(path).metadata.empty());
  nn::save_safetensors(path, {});
  CHECK(nn::load_safetensors(path).tensors.empty());
}

TEST_CASE("safetensors byte layout: length, aligned JSON header, raw little-endian data") {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  nn::save_safetensors(path,
                       {{"w", from<float>({1.0f, 2.0f}, {2})}, {"n", from<std::int64_t>({-2}, {})}},
                       {{"k", "v"}});
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  REQUIRE(bytes.size() == 8 + n + 8 + 8);
  const json header = json::parse(bytes.substr(8, n));
  // The metadata as given, plus each tensor's checksum: 64-bit FNV-1a of its bytes.
  auto fnv = [](const std::string& data) {
    std::uint64_t h = 14695981039346656037ULL;
    for (unsigned char c : data) h = (h ^ c) * 1099511628211ULL;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return std::string(hex);
  };
  CHECK(header["__metadata__"] == json{{"k", "v"},
                                       {"tinyformer.fnv1a64.w", fnv(raw_of<float>({1.0f, 2.0f}))},
                                       {"tinyformer.fnv1a64.n", fnv(raw_of<std::int64_t>({-2}))}});
  CHECK(header["w"] ==
        json{{"dtype", "F32"}, {"shape", json::array({2})}, {"data_offsets", json::array({0, 8})}});
  CHECK(header["n"] ==
        json{{"dtype", "I64"}, {"shape", json::array()}, {"data_offsets", json::array({8, 16})}});
  CHECK(bytes.substr(8 + n) == raw_of<float>({1.0f, 2.0f}) + raw_of<std::int64_t>({-2}));
}

TEST_CASE("a file in the layout Python's safetensors writes loads") {
  TempDir dir;
  const std::string path = dir.file("python.safetensors");
  // safetensors.torch.save_file({"weight": ..., "ids": ..., "mask": ...}, metadata={"format":
  // "pt"}) lays the tensors out by alignment then name, lists the JSON keys in another order,
  // and pads the header with spaces to a multiple of 8.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
      R"("mask":{"dtype":"BOOL","shape":[2,2],"data_offsets":[40,44]},)"
      R"("weight":{"dtype":"F64","shape":[1,3],"data_offsets":[16,40]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string data = raw_of<std::int64_t>({5, -6}) + raw_of<double>({0.5, 1.5, -2.5}) +
                           std::string("\x01\x00\x00\x01", 4);
  write_bytes(path, safetensors_bytes(header, data));
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  CHECK(file.metadata == nn::Metadata{{"format", "pt"}});
  REQUIRE(file.tensors.size() == 3);
  CHECK(file.tensors[0].first == "ids");  // in data order
  CHECK(file.tensors[0].second.to_vector<std::int64_t>() == std::vector<std::int64_t>{5, -6});
  CHECK(file.tensors[1].first == "weight");
  CHECK(file.tensors[1].second.shape() == Shape{1, 3});
  CHECK(file.tensors[1].second.to_vector<double>() == std::vector<double>{0.5, 1.5, -2.5});
  CHECK(file.tensors[2].first == "mask");
  CHECK(file.tensors[2].second.to_vector<bool>() == std::vector<bool>{true, false, false, true});
  // A null __metadata__ is accepted, as Python's reader does.
  write_bytes(path, safetensors_bytes(R"({"__metadata__":null})", ""));
  CHECK(nn::load_safetensors(path).metadata.empty());
}

TEST_CASE("every truncation of a file is an Error") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  nn::save_safetensors(good,
                       {{"a", from<float>({1, 2, 3}, {3})}, {"b", from<bool>({true, false}, {2})}},
                       {{"m", "x"}});
  const std::string bytes = read_bytes(good);
  const std::string path = dir.file("cut.safetensors");
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    INFO("length ", len);
    write_bytes(path, bytes.substr(0, len));
    CHECK_THROWS_AS(nn::load_safetensors(path), Error);
  }
  expect_load_error(dir.file("missing.safetensors"), "cannot open");
  expect_load_error(dir.path.string(), "not a regular file");
  write_bytes(path, "");
  expect_load_error(path, "fewer than the 8");
  // Data past the last tensor is refused too (the file is not what its header says).
  write_bytes(path, bytes + "xx");
  expect_load_error(path, "cover only");
}

TEST_CASE("flipped bytes in the length or header give an Error or a consistent file") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  nn::save_safetensors(good,
                       {{"a", from<float>({1, 2, 3}, {3})},
                        {"b", from<bool>({true, false}, {2})},
                        {"c", from<std::int64_t>({9}, {1})}},
                       {{"m", "x"}});
  const std::string bytes = read_bytes(good);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string path = dir.file("flipped.safetensors");
  int errors = 0, loaded = 0;
  for (std::size_t pos = 0; pos < 8 + n; ++pos) {
    for (unsigned char mask : {0x01, 0x20, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[pos] = static_cast<char>(bad[pos] ^ mask);
      write_bytes(path, bad);
      try {
        const nn::SafetensorsFile file = nn::load_safetensors(path);
        // A flip inside a name or a metadata string can leave a valid file; then it must
        // describe exactly the data that is there.
        std::int64_t total = 0;
        for (const auto& [name, t] : file.tensors) total += t.numel() * element_size(t.dtype());
        CHECK(static_cast<std::uint64_t>(total) == bytes.size() - 8 - n);
        ++loaded;
      } catch (const Error&) {
        ++errors;
      }
    }
  }
  CHECK(errors > 0);
  CHECK(loaded > 0);
  // A flipped data byte of a BOOL tensor would be an invalid bool.
  std::string bad = bytes;
  bad[8 + n + 12] = 2;  // a: 12 bytes, then b
  write_bytes(path, bad);
  expect_load_error(path, "is BOOL but element 0 is 2");
}

TEST_CASE("malformed headers are Errors that say what is wrong") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::string f8 = raw_of<float>({1, 2});  // 8 bytes of data
  auto check = [&](const std::string& header, const std::string& data, const std::string& needle) {
    INFO(header);
    write_bytes(path, safetensors_bytes(header, data));
    expect_load_error(path, needle);
  };
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  std::uint64_t begin, std::uint64_t end) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
  };
  check("{" + entry("a", "F32", "[2]", 0, 8) + "}", f8 + "junk", "cover only 8");
  check("{" + entry("a", "F32", "[3]", 0, 8) + "}", f8, "needs 12 bytes");
  check("{" + entry("a", "F32", "[2]", 0, 16) + "}", f8, "outside the data section");
  check("{" + entry("a", "F32", "[2]", 8, 0) + "}", f8, "outside the data section");
  check("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 2, 6) + "}", f8,
        "overlaps tensor \"a\"");
  check("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 0, 4) + "}", f8,
        "overlaps");
  check("{" + entry("a", "F32", "[1]", 4, 8) + "}", f8, "belong to no tensor");
  check("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("a", "F32", "[1]", 4, 8) + "}", f8,
        "names \"a\" twice");
  check("{" + entry("a", "F16", "[4]", 0, 8) + "}", f8, "unsupported dtype \"F16\"");
  check("{" + entry("a", "F32", "[-2]", 0, 8) + "}", f8, "non-negative integer");
  check("{" + entry("a", "F32", "[2.0]", 0, 8) + "}", f8, "non-negative integer");
  check("{" + entry("a", "F32", "2", 0, 8) + "}", f8, "shape must be an array");
  check("{" + entry("a", "F32", "[4294967296,4294967296,4294967296]", 0, 8) + "}", f8, "too large");
  // Empty, but strides of 2^62 * 2^62 elements would overflow.
  check("{" + entry("a", "F32", "[0,4611686018427387904,4611686018427387904]", 0, 0) + "}", "",
        "too large");
  check("{" + entry("", "F32", "[2]", 0, 8) + "}", f8, "empty name");
  check(R"({"a":{"dtype":"F32","shape":[2]}})", f8, "has no \"data_offsets\"");
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", f8,
        "unknown field \"x\"");
  check(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f8,
        "names \"dtype\" twice");
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", f8, "[begin, end]");
  check(R"({"a":[1,2]})", f8, "must be a JSON object");
  check(R"({"a":{"dtype":"F32","shape":[[[2]]],"data_offsets":[0,8]}})", f8, "nests");
  check(R"({"__metadata__":{"k":1}})", "", "must be a string");
  check(R"({"__metadata__":[]})", "", "__metadata__ must be an object");
  check(R"({"a": )", "", "not valid JSON");
  check(R"({"a":1} trailing)", "", "not valid JSON");
  check("{\"\xff\":1}", "", "not valid JSON");
  check(R"([1,2,3])", "", "must start with '{'");
  check(std::string(1000, '['), "", "must start with '{'");
  check("{\"a\":" + std::string(100000, '[') + "}", "", "nests");

  // The length field itself.
  write_bytes(path, u64_le(100) + "{}");
  expect_load_error(path, "only 2 bytes follow");
  write_bytes(path, u64_le(~0ULL) + "{}");
  expect_load_error(path, "only 2 bytes follow");
  write_bytes(path, u64_le(0) + "{}");
  expect_load_error(path, "too short");
  {
    // A header length above the cap is refused before anything is allocated for it.
    std::string big = u64_le(200'000'001) + "{}";
    write_bytes(path, big);
    fs::resize_file(path, 8 + 200'000'001);
    expect_load_error(path, "exceeds the limit");
  }
}

TEST_CASE("save_safetensors validates names and leaves no temporary file on failure") {
  TempDir dir;
  const Tensor t = ones({2});
  const std::string path = dir.file("x.safetensors");
  CHECK_THROWS_AS(nn::save_safetensors(path, {{"a", t}, {"a", t}}), Error);
  CHECK_THROWS_AS(nn::save_safetensors(path, {{"", t}}), Error);
  CHECK_THROWS_AS(nn::save_safetensors(path, {{"__metadata__", t}}), Error);
  CHECK_THROWS_AS(nn::save_safetensors(path, {{"a", Tensor()}}), Error);
  CHECK_THROWS_AS(nn::save_safetensors(path, {{"bad \xff name", t}}), Error);
  CHECK_THROWS_AS(nn::save_safetensors(path, {{"a", t}}, {{"k", "\xc3"}}), Error);
  CHECK_THROWS_AS(nn::save_safetensors(dir.file("no/such/dir/x.safetensors"), {{"a", t}}), Error);
  // Renaming over a directory fails after the temporary file was written: it is removed.
  fs::create_directories(dir.file("occupied"));
  fs::create_directories(dir.file("occupied/inside"));
  CHECK_THROWS_AS(nn::save_safetensors(dir.file("occupied"), {{"a", t}}), Error);
  CHECK(!fs::exists(path));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  CHECK(files == 0);
}

TEST_CASE("checkpoint: model and optimizer round trip, then training continues identically") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  manual_seed(11);
  const Tensor tokens = from<std::int64_t>({1, 2, 3, 4, 5, 6, 7, 0, 3, 3, 2, 1}, {2, 6});
  const Tensor labels = from<std::int64_t>({1, 0}, {2});
  auto train = [&](nn::SequenceClassifier& model, optim::Optimizer& opt, int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      cross_entropy(model.forward(tokens), labels).backward();
      opt.step();
    }
  };
  manual_seed(3);
  auto straight = std::make_shared<nn::SequenceClassifier>(small_config(), 10, 2);
  optim::AdamW opt_straight(optim::decay_groups(*straight, 0.1), {.lr = 0.01});
  train(*straight, opt_straight, 4);

  manual_seed(3);
  auto first = std::make_shared<nn::SequenceClassifier>(small_config(), 10, 2);
  optim::AdamW opt_first(optim::decay_groups(*first, 0.1), {.lr = 0.01});
  train(*first, opt_first, 2);
  nn::save_checkpoint(path, *first, &opt_first, {{"step", "2"}});

  manual_seed(99);  // a differently initialised model and an optimizer with no state
  auto resumed = std::make_shared<nn::SequenceClassifier>(small_config(), 10, 2);
  optim::AdamW opt_resumed(optim::decay_groups(*resumed, 0.1), {.lr = 0.5});
  const nn::Metadata meta = nn::load_checkpoint(path, *resumed, &opt_resumed);
  CHECK(meta.at("step") == "2");
  CHECK(meta.at("tinyformer.optimizer") == "AdamW");
  CHECK(opt_resumed.lr() == 0.01);
  for (std::size_t i = 0; i < first->state_dict().size(); ++i) {
    CHECK(same_tensor(resumed->state_dict()[i].second, first->state_dict()[i].second));
  }
  train(*resumed, opt_resumed, 2);
  const auto want = straight->state_dict();
  const auto got = resumed->state_dict();
  REQUIRE(want.size() == got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].first);
    CHECK(same_tensor(got[i].second, want[i].second));
  }

  // The model alone loads from a checkpoint with optimizer state (inference).
  manual_seed(5);
  auto inference = std::make_shared<nn::SequenceClassifier>(small_config(), 10, 2);
  nn::load_checkpoint(path, *inference);
  CHECK(same_tensor(inference->classifier->weight, first->classifier->weight));
}

TEST_CASE("checkpoint of another configuration: one clear Error, nothing changes") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  auto saved = std::make_shared<nn::SequenceClassifier>(small_config(), 10, 2);
  optim::AdamW saved_opt(saved->parameters(), {});
  nn::save_checkpoint(path, *saved, &saved_opt);
  const std::string model_only = dir.file("model.safetensors");
  nn::save_checkpoint(model_only, *saved);

  auto expect_error = [&](const std::string& file, nn::Module& model, optim::Optimizer* opt,
                          const std::string& needle) {
    const nn::StateDict before = model.state_dict();
    std::vector<Tensor> copies;
    for (const auto& [name, t] : before) copies.push_back(t.clone());
    const std::size_t opt_entries = opt ? opt->state_dict().size() : 0;
    try {
      nn::load_checkpoint(file, model, opt);
      FAIL("expected an Error containing ", needle);
    } catch (const Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
      CHECK_MESSAGE(std::string(e.what()).find("load_checkpoint: " + file) != std::string::npos,
                    e.what());
    }
    for (std::size_t i = 0; i < before.size(); ++i) CHECK(same_tensor(before[i].second, copies[i]));
    if (opt) CHECK(opt->state_dict().size() == opt_entries);
  };

  nn::EncoderConfig other_k = small_config();
  other_k.linformer.k = 6;
  auto model_k = std::make_shared<nn::SequenceClassifier>(other_k, 10, 2);
  expect_error(path, *model_k, nullptr, "in the checkpoint, the module's");

  nn::EncoderConfig more_layers = small_config();
  more_layers.layers = 2;
  auto model_layers = std::make_shared<nn::SequenceClassifier>(more_layers, 10, 2);
  expect_error(path, *model_layers, nullptr, "but the checkpoint has no \"model.");

  auto model_classes = std::make_shared<nn::SequenceClassifier>(small_config(), 10, 3);
  expect_error(path, *model_classes, nullptr, "model.classifier.weight");

  auto model_f64 = std::make_shared<nn::SequenceClassifier>(small_config(), 10, 2);
  model_f64->to(kFloat64);
  expect_error(path, *model_f64, nullptr, "float32");

  auto fewer = std::make_shared<nn::Linear>(8, 2);
  expect_error(path, *fewer, nullptr, "another configuration");

  // The right model with the wrong optimizer, or none saved.
  auto model = std::make_shared<nn::SequenceClassifier>(small_config(), 10, 2);
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  expect_error(path, *model, &sgd, "holds AdamW state, the optimizer is SGD");
  optim::AdamW grouped(optim::decay_groups(*model, 0.1), {});
  expect_error(path, *model, &grouped, "optimizer state does not fit");
  optim::AdamW plain(model->parameters(), {});
  expect_error(model_only, *model, &plain, "no optimizer state");

  // Keys outside model.* and optim.*.
  nn::save_safetensors(dir.file("foreign.safetensors"), {{"weight", ones({2})}});
  expect_error(dir.file("foreign.safetensors"), *model, nullptr, "unexpected entry \"weight\"");
  // A corrupted file is reported by the loader, with the file's name.
  write_bytes(dir.file("corrupt.safetensors"), read_bytes(path).substr(0, 100));
  CHECK_THROWS_AS(nn::load_checkpoint(dir.file("corrupt.safetensors"), *model), Error);
  // And the right one loads.
  CHECK_NOTHROW(nn::load_checkpoint(path, *model, &plain));
}

TEST_CASE("a save killed mid-write leaves the previous checkpoint intact") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const nn::StateDict old_state = {{"w", from<float>({1, 2, 3, 4}, {2, 2})}};
  nn::save_safetensors(path, old_state, {{"version", "old"}});
  const std::string old_bytes = read_bytes(path);
  // 64 MiB: long enough to write that a kill soon after the start lands mid-save.
  const nn::StateDict new_state = {{"big", full({16, 1024, 1024}, 0.5)}};

  int interrupted = 0;
  for (int delay_us : {0, 200, 1000, 3000, 10000, 30000}) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child only writes bytes of tensors made before the fork: no thread pool, no
      // allocator lock, nothing that another thread of the parent could hold.
      ::close(ready[0]);
      (void)!::write(ready[1], "x", 1);
      try {
        nn::save_safetensors(path, new_state, {{"version", "new"}});
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    char c;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    // The save hashes the tensors before it creates the temporary file: the delay counts from
    // the moment the file appears (or the child ends first).
    const std::string tmp = path + ".tmp." + std::to_string(child);
    int status = 0;
    pid_t done = 0;
    while (!fs::exists(tmp) && (done = ::waitpid(child, &status, WNOHANG)) == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (done == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      ::kill(child, SIGKILL);
      REQUIRE(::waitpid(child, &status, 0) == child);
    }

    const bool killed = WIFSIGNALED(status);
    if (killed && fs::exists(tmp)) ++interrupted;
    fs::remove(tmp);

    // The checkpoint is the old one, or (if the child finished first) the complete new one.
    const nn::SafetensorsFile file = nn::load_safetensors(path);
    if (file.metadata.at("version") == "old") {
      CHECK(read_bytes(path) == old_bytes);
    } else {
      CHECK(!killed);
      REQUIRE(file.tensors.size() == 1);
      CHECK(same_tensor(file.tensors[0].second, new_state[0].second));
      nn::save_safetensors(path, old_state, {{"version", "old"}});
    }
  }
  // At least one kill landed while the temporary file was being written.
  CHECK(interrupted > 0);
}

TEST_CASE("a flipped byte in tensor data fails its checksum; files without checksums load") {
  TempDir dir;
  const std::string path = dir.file("sum.safetensors");
  nn::save_safetensors(path, {{"a", from<float>({1, 2, 3}, {3})}, {"b", from<double>({4, 5}, {2})}},
                       {{"m", "x"}});
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string bad_path = dir.file("bad.safetensors");
  // Every bit of every data byte: a, bytes [0, 12); b, bytes [12, 28).
  for (std::size_t pos = 8 + n; pos < bytes.size(); ++pos) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[pos] = static_cast<char>(bad[pos] ^ (1 << bit));
      write_bytes(bad_path, bad);
      const std::string name = pos - 8 - n < 12 ? "\"a\"" : "\"b\"";
      expect_load_error(bad_path, "tensor " + name + ": its data does not match its checksum");
    }
  }
  // The checksum entries are not part of the metadata a caller sees.
  CHECK(nn::load_safetensors(path).metadata == nn::Metadata{{"m", "x"}});
  CHECK_THROWS_WITH_AS(nn::save_safetensors(path, {}, {{"tinyformer.fnv1a64.a", "0"}}),
                       doctest::Contains("reserved for checksums"), Error);

  // A file with checksums must have one per tensor, each naming a tensor it holds.
  const std::string f12 = raw_of<float>({1, 2, 3});
  const std::string entry_a = R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]})";
  auto header = [&](const std::string& meta) {
    return "{\"__metadata__\":{" + meta + "}," + entry_a + "}";
  };
  write_bytes(bad_path,
              safetensors_bytes(header(R"("tinyformer.fnv1a64.b":"0000000000000000")"), f12));
  expect_load_error(bad_path, "tensor \"a\" has no checksum");
  write_bytes(bad_path,
              safetensors_bytes(header(R"("tinyformer.fnv1a64.a":"00000000000000000")"), f12));
  expect_load_error(bad_path, "must be 16 lowercase hex digits");
  write_bytes(bad_path,
              safetensors_bytes(header(R"("tinyformer.fnv1a64.a":"ABCDEF0123456789")"), f12));
  expect_load_error(bad_path, "must be 16 lowercase hex digits");
  write_bytes(bad_path,
              safetensors_bytes(header(R"("tinyformer.fnv1a64.a":"0000000000000000")"), f12));
  expect_load_error(bad_path, "does not match its checksum");
  // Without any checksum entry (Python's safetensors writes none) the data loads unchecked.
  write_bytes(bad_path, safetensors_bytes(header(R"("format":"pt")"), f12));
  CHECK(nn::load_safetensors(bad_path).tensors.at(0).second.to_vector<float>() ==
        std::vector<float>{1, 2, 3});
}

TEST_CASE("loading refuses what is not a regular file, without blocking on a FIFO") {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  expect_load_error(fifo, "not a regular file but a FIFO");
  expect_load_error(dir.path.string(), "not a regular file but a directory");
  expect_load_error("/dev/null", "not a regular file but a character device");
  auto model = std::make_shared<nn::Linear>(2, 2);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(fifo, *model), doctest::Contains("a FIFO"), Error);
}

TEST_CASE("saving refuses special files and directories, and follows a symbolic link") {
  TempDir dir;
  const nn::StateDict state = {{"w", from<float>({1, 2}, {2})}};
  auto expect_save_error = [&](const std::string& path, const std::string& needle) {
    CAPTURE(path);
    CHECK_THROWS_WITH_AS(nn::save_safetensors(path, state), doctest::Contains(needle.c_str()),
                         Error);
  };
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  expect_save_error(fifo, "not a regular file but a FIFO; refusing to replace it");
  CHECK(fs::is_fifo(fifo));
  fs::create_directories(dir.file("sub"));
  expect_save_error(dir.file("sub"), "not a regular file but a directory");
  // A link to a device: refused, and neither the link nor the device changes.
  fs::create_symlink("/dev/null", dir.file("null_link"));
  expect_save_error(dir.file("null_link"), "(a symbolic link to /dev/null): not a regular file");
  CHECK(fs::is_symlink(dir.file("null_link")));
  CHECK(fs::is_character_file("/dev/null"));
  fs::create_symlink(dir.file("sub"), dir.file("dir_link"));
  expect_save_error(dir.file("dir_link"), "a directory");
  fs::create_symlink(dir.file("missing"), dir.file("dangling"));
  expect_save_error(dir.file("dangling"), "a symbolic link that cannot be followed");
  CHECK(fs::is_symlink(dir.file("dangling")));
  CHECK_FALSE(fs::exists(dir.file("missing")));
  expect_save_error(dir.file("no/such/dir/x.safetensors"), "cannot write to the directory");

  // A link to a regular file in another directory: the target is replaced (its temporary file
  // beside it), the link stays a link.
  const std::string target = dir.file("sub/target.safetensors");
  nn::save_safetensors(target, {{"old", ones({1})}});
  fs::create_symlink(target, dir.file("latest.safetensors"));
  nn::save_safetensors(dir.file("latest.safetensors"), state);
  CHECK(fs::is_symlink(dir.file("latest.safetensors")));
  CHECK(fs::read_symlink(dir.file("latest.safetensors")) == target);
  CHECK(nn::load_safetensors(target).tensors.at(0).first == "w");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.file("sub"))) entries += e.exists() ? 1 : 0;
  CHECK(entries == 1);  // the target only: no temporary file left
}

TEST_CASE("a save removes the temporary files of dead processes, not of live ones") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);  // reaped: its pid names no process now
  const std::string dead = path + ".tmp." + std::to_string(child);
  const std::string alive = path + ".tmp." + std::to_string(::getppid());
  const std::string other = path + ".tmp.notapid";
  const std::string other_file = dir.file("other.safetensors.tmp." + std::to_string(child));
  for (const std::string& f : {dead, alive, other, other_file}) write_bytes(f, "partial");
  nn::save_safetensors(path, {{"w", ones({2})}});
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(alive));
  CHECK(fs::exists(other));
  CHECK(fs::exists(other_file));  // another checkpoint's: not this save's business
  CHECK(nn::load_safetensors(path).tensors.size() == 1);
}

TEST_CASE("optimizer state out of range is refused on load, and nothing changes") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  auto model = std::make_shared<nn::Linear>(3, 2);
  optim::AdamW opt(model->parameters(), {.lr = 0.01});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    sum(model->forward(ones({4, 3}))).backward();
    opt.step();
  }
  auto save_with = [&](const std::string& key, const Tensor& value) {
    nn::StateDict state = opt.state_dict();
    for (auto& [name, t] : state) {
      if (name == key) t = value;
    }
    nn::StateDict all;
    for (const auto& [name, t] : model->state_dict()) all.emplace_back("model." + name, t);
    for (const auto& [name, t] : state) all.emplace_back("optim." + name, t);
    nn::save_safetensors(path, all, {{"tinyformer.optimizer", "AdamW"}});
  };
  auto fresh = std::make_shared<nn::Linear>(3, 2);
  optim::AdamW fresh_opt(fresh->parameters(), {.lr = 0.5});
  auto expect_refused = [&](const std::string& needle) {
    CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *fresh, &fresh_opt),
                         doctest::Contains(needle.c_str()), Error);
    CHECK(fresh_opt.step_count(0) == 0);
    CHECK(fresh_opt.lr() == 0.5);
  };
  const Tensor huge = scalar_tensor(0.0, {.dtype = kInt64}) + static_cast<double>(INT64_MAX);
  save_with("state.0.step", huge);
  expect_refused("\"state.0.step\" must lie in [1, 9007199254740992], got 9223372036854775807");
  save_with("state.0.step", scalar_tensor(0.0, {.dtype = kInt64}));
  expect_refused("must lie in [1,");
  save_with("state.0.exp_avg_sq", full({2, 3}, -1.0));
  expect_refused("\"state.0.exp_avg_sq\" element 0 is -1 (expected a finite, non-negative value)");
  save_with("state.0.exp_avg", full({2, 3}, NAN));
  expect_refused("\"state.0.exp_avg\" element 0 is nan");
  save_with("state.0.exp_avg", full({2, 3}, -1.0));  // a negative first moment is fine
  CHECK_NOTHROW(nn::load_checkpoint(path, *fresh, &fresh_opt));
  CHECK(fresh_opt.step_count(0) == 3);
}
