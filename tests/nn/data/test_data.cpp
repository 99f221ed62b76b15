// Data utilities: byte tokenizer, corpus loading, padding and chunking, masked-LM statistics,
// the resumable loader, and ListOps generation, evaluation and files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
using namespace tinyformer::nn::data;
namespace fs = std::filesystem;

namespace {
// A fresh directory under the system's temporary directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() /
           ("tinyformer_test_data_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path write(const std::string& name, const std::string& content) const {
    const fs::path file = path / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << content;
    return file;
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::uint8_t> ids(const std::string& expression) {
  return parse_listops(expression);
}
std::int64_t eval(const std::string& expression) {
  return evaluate_listops(ids(expression));
}
}  // namespace

// --- Tokenizer ---

TEST_CASE("byte tokenizer round-trips every byte, UTF-8 included") {
  std::string text = "h\xC3\xA9llo, w\xC3\xB6rld \xE2\x82\xAC \xF0\x9F\x98\x80";  // é ö € 😀
  for (int b = 0; b < 256; ++b) text += static_cast<char>(b);
  const std::vector<std::int64_t> encoded = ByteTokenizer::encode(text);
  REQUIRE(encoded.size() == text.size());
  for (const std::int64_t id : encoded) {
    CHECK(id >= ByteTokenizer::first_byte_id);
    CHECK(id < ByteTokenizer::vocab_size);
  }
  CHECK(encoded[0] == ByteTokenizer::first_byte_id + 'h');
  CHECK(encoded[1] == ByteTokenizer::first_byte_id + 0xC3);
  CHECK(ByteTokenizer::decode(encoded) == text);
  CHECK(ByteTokenizer::vocab_size == 260);
}

TEST_CASE("byte tokenizer renders special tokens and rejects unknown ids") {
  const std::vector<std::int64_t> seq = {ByteTokenizer::cls_id, ByteTokenizer::byte_id('a'),
                                         ByteTokenizer::mask_id, ByteTokenizer::sep_id,
                                         ByteTokenizer::pad_id};
  CHECK(ByteTokenizer::decode(seq) == "[CLS]a[MASK][SEP][PAD]");
  CHECK(ByteTokenizer::token_string(ByteTokenizer::byte_id('z')) == "z");
  CHECK(ByteTokenizer::is_special(ByteTokenizer::mask_id));
  CHECK_FALSE(ByteTokenizer::is_special(ByteTokenizer::byte_id(0)));
  CHECK(contains(error_of([] { ByteTokenizer::decode({260}); }), "outside the byte vocabulary"));
  CHECK_THROWS_AS(ByteTokenizer::decode({-1}), Error);
}

// --- Corpus ---

TEST_CASE("load_text reads a file and a directory in sorted order") {
  TempDir dir("corpus");
  const fs::path single = dir.write("one.txt", "alpha\n");
  CHECK(load_text(single) == "alpha\n");

  dir.write("books/b.txt", "second");  // no trailing newline: one is added before the next
  dir.write("books/a.txt", "first\n");
  dir.write("books/c/d.txt", "third\n");
  dir.write("books/empty.txt", "");
  dir.write("books/.hidden", "secret\n");
  dir.write("books/.git/config", "secret\n");
  CHECK(load_text(dir.path / "books") == "first\nsecond\nthird\n");
}

TEST_CASE("load_text errors say what is wrong and what to do") {
  TempDir dir("corpus_errors");
  const std::string missing = error_of([&] { load_text(dir.path / "nope.txt"); });
  CHECK(contains(missing, "does not exist"));
  CHECK(contains(missing, "nope.txt"));
  const fs::path empty = dir.write("empty.txt", "");
  CHECK(contains(error_of([&] { load_text(empty); }), "is empty"));
  fs::create_directories(dir.path / "nothing");
  dir.write("nothing/.hidden", "x");
  CHECK(contains(error_of([&] { load_text(dir.path / "nothing"); }), "holds no non-empty files"));
}

TEST_CASE("split_text is contiguous and deterministic") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  const TextSplit split = split_text(text, 0.1);
  CHECK(split.train.size() == 90);
  CHECK(split.validation.size() == 10);
  CHECK(split.train + split.validation == text);
  CHECK(split_text(text, 0.1).validation == split.validation);
  CHECK(split_text("ab", 0.001).validation == "b");  // never an empty part
  CHECK_THROWS_AS(split_text(text, 0.0), Error);
  CHECK_THROWS_AS(split_text(text, 1.0), Error);
  CHECK_THROWS_AS(split_text("a", 0.5), Error);
}

// --- Random stream ---

TEST_CASE("the data random stream is portable and unbiased") {
  // A fixed seed gives a fixed permutation on every compiler and machine.
  Rng rng(42);
  const std::vector<std::int64_t> order = permutation(10, rng);
  std::vector<std::int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 10; ++i) CHECK(sorted[static_cast<std::size_t>(i)] == i);
  Rng again(42);
  CHECK(permutation(10, again) == order);
  CHECK(order == std::vector<std::int64_t>{7, 3, 8, 9, 1, 5, 2, 0, 4, 6});
  // Seed 0 starts with Philox4x32-10's published known answer for key 0, counter 0.
  Rng zero(0);
  CHECK(zero.next_u32() == 0x6627e8d5u);
  CHECK(zero.next_u32() == 0xe169c58du);

  Rng counts_rng(7);
  std::int64_t counts[6] = {};
  for (int i = 0; i < 60000; ++i) ++counts[counts_rng.uniform_int(0, 5)];
  for (const std::int64_t c : counts) CHECK(std::abs(c - 10000) < 500);  // ~5 sigma
  CHECK(mix_seed(1, 0) != mix_seed(1, 1));
  CHECK(mix_seed(1, 0) != mix_seed(2, 0));
}

// --- Padding and chunking ---

TEST_CASE("pad_batch pads to the longest or a fixed length, with the mask") {
  const PaddedBatch b = pad_batch({{5, 6, 7}, {8}, {}});
  REQUIRE(b.tokens.shape() == Shape{3, 3});
  CHECK(b.tokens.dtype() == DType::int64);
  CHECK(b.padding_mask.dtype() == DType::boolean);
  CHECK(b.tokens.to_vector<std::int64_t>() == std::vector<std::int64_t>{5, 6, 7, 8, 0, 0, 0, 0, 0});
  CHECK(b.padding_mask.to_vector<bool>() ==
        std::vector<bool>{false, false, false, false, true, true, true, true, true});

  const PaddedBatch fixed = pad_batch({{5, 6}}, {.pad_id = 9, .length = 4});
  CHECK(fixed.tokens.to_vector<std::int64_t>() == std::vector<std::int64_t>{5, 6, 9, 9});
  CHECK(contains(error_of([] { pad_batch({{1, 2, 3}}, {.length = 2}); }), "set truncate"));
  const PaddedBatch cut = pad_batch({{1, 2, 3}}, {.length = 2, .truncate = true});
  CHECK(cut.tokens.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2});
  CHECK_THROWS_AS(pad_batch({}), Error);
  // A fixed length whose batch does not fit: checked before the host vectors are made.
  CHECK(contains(error_of([] {
                   pad_batch({{1}, {2}, {3}, {4}}, {.length = std::int64_t{1} << 62});
                 }),
                 "pad_batch: shape [4, 4611686018427387904] is too large"));
  CHECK(contains(error_of([] {
                   pad_batch({{1}, {2}}, {.length = std::int64_t{1} << 40});
                 }),
                 "pad_batch: out of memory: shape [2, 1099511627776] int64 asked for"));
}

TEST_CASE("TokenChunks cuts a stream into fixed-length examples") {
  std::vector<std::int64_t> stream(100);
  for (int i = 0; i < 100; ++i) stream[static_cast<std::size_t>(i)] = 4 + i;
  const TokenChunks plain(stream, 10);
  CHECK(plain.size() == 10);
  CHECK(plain.example(3)[0] == 34);
  const TokenChunks with_cls(stream, 10, ByteTokenizer::cls_id);
  CHECK(with_cls.size() == 11);  // 100 / 9 stream tokens per example
  const std::vector<std::int64_t> e1 = with_cls.example(1);
  CHECK(e1[0] == ByteTokenizer::cls_id);
  CHECK(e1[1] == 4 + 9);
  CHECK(e1[9] == 4 + 17);
  const Tensor b = with_cls.batch({0, 10});
  CHECK(b.shape() == Shape{2, 10});
  CHECK_THROWS_AS(with_cls.example(11), Error);
  CHECK(contains(error_of([&] { TokenChunks(stream, 200); }), "too short"));
  CHECK_THROWS_AS(TokenChunks(stream, 1, ByteTokenizer::cls_id), Error);
}

// --- Masked LM ---

TEST_CASE("masked-LM masking follows 15% and 80/10/10, never touching specials or padding") {
  // 64 rows: [CLS] then 300..511 random bytes, padded to 512.
  Rng rng(3);
  std::vector<std::vector<std::int64_t>> rows;
  for (int r = 0; r < 64; ++r) {
    std::vector<std::int64_t> row = {ByteTokenizer::cls_id};
    const std::int64_t len = rng.uniform_int(300, 511);
    for (std::int64_t i = 0; i < len; ++i)
      row.push_back(ByteTokenizer::byte_id(rng.uniform_int(0, 255)));
    rows.push_back(row);
  }
  const PaddedBatch input = pad_batch(rows, {.length = 512});
  const std::vector<std::int64_t> before = input.tokens.to_vector<std::int64_t>();
  const nn::data::MlmConfig config;
  const MlmBatch out = mask_tokens(input, config, 1234);
  REQUIRE(out.tokens.shape() == Shape{64, 512});
  REQUIRE(out.labels.shape() == Shape{64, 512});
  REQUIRE(out.labels.dtype() == DType::int64);
  CHECK(input.tokens.to_vector<std::int64_t>() == before);  // the input is not modified
  CHECK(out.padding_mask.to_vector<bool>() == input.padding_mask.to_vector<bool>());

  const auto tokens = out.tokens.to_vector<std::int64_t>();
  const auto labels = out.labels.to_vector<std::int64_t>();
  const auto pad = input.padding_mask.to_vector<bool>();
  std::int64_t eligible = 0, picked = 0, masked = 0, random = 0, kept = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    const bool regular = !pad[i] && before[i] >= ByteTokenizer::first_byte_id;
    eligible += regular;
    if (labels[i] == -100) {
      CHECK(tokens[i] == before[i]);  // unpicked positions are untouched
      continue;
    }
    REQUIRE(regular);  // pad and CLS are never picked
    CHECK(labels[i] == before[i]);
    ++picked;
    if (tokens[i] == ByteTokenizer::mask_id) {
      ++masked;
    } else if (tokens[i] == before[i]) {
      ++kept;
    } else {
      ++random;
      CHECK(tokens[i] >= ByteTokenizer::first_byte_id);
      CHECK(tokens[i] < ByteTokenizer::vocab_size);
    }
  }
  // ~26,000 eligible and ~3,900 picked: the bounds are about 5 standard deviations.
  const double rate = static_cast<double>(picked) / static_cast<double>(eligible);
  CHECK(std::abs(rate - 0.15) < 0.012);
  const double p = static_cast<double>(picked);
  CHECK(std::abs(masked / p - 0.8) < 0.035);
  CHECK(std::abs(random / p - 0.1) < 0.025);
  CHECK(std::abs(kept / p - 0.1) < 0.025);
  for (std::size_t i = 0; i < before.size(); ++i) {
    if (pad[i]) CHECK(tokens[i] == ByteTokenizer::pad_id);
  }
}

TEST_CASE("masked-LM never picks a position the padding mask marks, whatever its id") {
  // Padding written with a regular id (a batch padded by other code): the mask alone decides.
  PaddedBatch input = pad_batch({{10, 11, 12, 13, 14, 15}});
  input.padding_mask = from(std::vector<bool>{false, false, false, true, true, true}, {1, 6});
  const auto labels = mask_tokens(input, {.mask_prob = 1.0}, 0).labels.to_vector<std::int64_t>();
  CHECK(labels == std::vector<std::int64_t>{10, 11, 12, -100, -100, -100});
}

TEST_CASE("masked-LM batches are deterministic given the seed") {
  std::vector<std::vector<std::int64_t>> rows(8, ByteTokenizer::encode(std::string(200, 'x')));
  const PaddedBatch input = pad_batch(rows);
  const MlmBatch a = mask_tokens(input, {}, 5);
  const MlmBatch b = mask_tokens(input, {}, 5);
  const MlmBatch c = mask_tokens(input, {}, 6);
  CHECK(a.tokens.to_vector<std::int64_t>() == b.tokens.to_vector<std::int64_t>());
  CHECK(a.labels.to_vector<std::int64_t>() == b.labels.to_vector<std::int64_t>());
  CHECK(a.labels.to_vector<std::int64_t>() != c.labels.to_vector<std::int64_t>());
  // Rows draw from their own streams: identical rows get different masks.
  const auto labels = a.labels.to_vector<std::int64_t>();
  CHECK(std::vector<std::int64_t>(labels.begin(), labels.begin() + 200) !=
        std::vector<std::int64_t>(labels.begin() + 200, labels.begin() + 400));
}

TEST_CASE("mlm_batch masks an example the same way whatever batch it lands in") {
  const std::string text(5000, 'q');
  const TokenChunks data(ByteTokenizer::encode(text), 64, ByteTokenizer::cls_id);
  const MlmBatch ab = mlm_batch(data, {3, 7}, {}, 11, 2);
  const MlmBatch b = mlm_batch(data, {7}, {}, 11, 2);
  const MlmBatch next_epoch = mlm_batch(data, {7}, {}, 11, 3);
  CHECK(ab.tokens.shape() == Shape{2, 64});
  CHECK(ab.tokens.to_vector<std::int64_t>()[0] == ByteTokenizer::cls_id);
  const auto ab_labels = ab.labels.to_vector<std::int64_t>();
  CHECK(std::vector<std::int64_t>(ab_labels.begin() + 64, ab_labels.end()) ==
        b.labels.to_vector<std::int64_t>());
  CHECK(b.labels.to_vector<std::int64_t>() != next_epoch.labels.to_vector<std::int64_t>());
  CHECK_FALSE(b.padding_mask.to_vector<bool>()[5]);
}

TEST_CASE("masked-LM options: at least one target per row, configuration checks") {
  const PaddedBatch input = pad_batch({{ByteTokenizer::cls_id, 10, 11, 12}});
  nn::data::MlmConfig rare{.mask_prob = 1e-9};
  const auto labels = mask_tokens(input, rare, 0).labels.to_vector<std::int64_t>();
  CHECK(std::count_if(labels.begin(), labels.end(), [](std::int64_t l) { return l != -100; }) == 1);
  CHECK(labels[0] == -100);
  rare.at_least_one = false;
  const auto none = mask_tokens(input, rare, 0).labels.to_vector<std::int64_t>();
  CHECK(std::count(none.begin(), none.end(), -100) == 4);

  CHECK(contains(error_of([&] { mask_tokens(input, {.mask_prob = 1.5}, 0); }), "mask_prob"));
  CHECK_THROWS_AS(mask_tokens(input, {.replace_mask = 0.9, .replace_random = 0.2}, 0), Error);
  CHECK_THROWS_AS(mask_tokens(input, {.ignore_index = 5}, 0), Error);
  CHECK(
      contains(error_of([] { mask_tokens(pad_batch({{300}}), {}, 0); }), "outside the vocabulary"));
}

// --- Loader ---

namespace {
std::vector<std::vector<std::int64_t>> take(Loader& loader, int batches) {
  std::vector<std::vector<std::int64_t>> out;
  for (int i = 0; i < batches; ++i) out.push_back(loader.next().indices);
  return out;
}
}  // namespace

TEST_CASE("loader covers every example once per epoch, in a new order each epoch") {
  Loader loader(103, {.batch_size = 10, .seed = 9});
  CHECK(loader.batches_per_epoch() == 11);
  std::vector<std::vector<std::int64_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::int64_t> seen;
    for (int b = 0; b < 11; ++b) {
      const LoaderBatch batch = loader.next();
      CHECK(batch.epoch == epoch);
      CHECK(batch.step == b);
      CHECK(batch.indices.size() == (b < 10 ? 10u : 3u));
      seen.insert(seen.end(), batch.indices.begin(), batch.indices.end());
    }
    CHECK(loader.epoch_finished());
    orders.push_back(seen);
    std::sort(seen.begin(), seen.end());
    for (std::int64_t i = 0; i < 103; ++i) REQUIRE(seen[static_cast<std::size_t>(i)] == i);
  }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[1] != orders[2]);
  CHECK(orders[0] == loader.epoch_order(0));

  Loader same(103, {.batch_size = 10, .seed = 9});
  CHECK(same.next().indices ==
        std::vector<std::int64_t>(orders[0].begin(), orders[0].begin() + 10));
  Loader other(103, {.batch_size = 10, .seed = 10});
  CHECK(other.epoch_order(0) != orders[0]);
}

TEST_CASE("loader drop_last and no shuffle") {
  Loader loader(25, {.batch_size = 10, .shuffle = false, .drop_last = true});
  CHECK(loader.batches_per_epoch() == 2);
  CHECK(loader.next().indices == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(loader.next().indices[0] == 10);
  const LoaderBatch third = loader.next();  // the 5 left over are dropped
  CHECK(third.epoch == 1);
  CHECK(third.indices[0] == 0);
  CHECK_THROWS_AS(Loader(5, {.batch_size = 10, .drop_last = true}), Error);
  CHECK_THROWS_AS(Loader(0, {}), Error);
  CHECK_THROWS_AS(Loader(5, {.batch_size = 0}), Error);
}

TEST_CASE("a loader restored from a saved position gives the same batches") {
  const LoaderOptions options{.batch_size = 16, .seed = 77};
  Loader original(200, options);
  take(original, 17);  // into the second epoch (13 batches per epoch)
  const LoaderState saved = original.state();
  CHECK(saved.epoch == 1);
  const std::string as_text = saved.to_string();
  const Tensor as_tensor = saved.to_tensor();
  CHECK(as_tensor.dtype() == DType::int64);
  const auto expected = take(original, 20);

  Loader from_text(200, options);
  from_text.load_state(LoaderState::parse(as_text));
  CHECK(take(from_text, 20) == expected);
  Loader from_tensor(200, options);
  from_tensor.load_state(LoaderState::from_tensor(as_tensor));
  CHECK(from_tensor.state() == saved);
  CHECK(take(from_tensor, 20) == expected);

  // Masked-LM batches resume too: they depend only on (seed, epoch, example).
  const TokenChunks data(ByteTokenizer::encode(std::string(200 * 32, 'm')), 32);
  Loader a(200, options), b(200, options);
  take(a, 5);
  b.load_state(a.state());
  const LoaderBatch ba = a.next(), bb = b.next();
  CHECK(mlm_batch(data, ba.indices, {}, 1, ba.epoch).tokens.to_vector<std::int64_t>() ==
        mlm_batch(data, bb.indices, {}, 1, bb.epoch).tokens.to_vector<std::int64_t>());

  Loader wrong_seed(200, {.batch_size = 16, .seed = 78});
  CHECK(contains(error_of([&] { wrong_seed.load_state(saved); }), "seed"));
  Loader wrong_size(201, options);
  CHECK_THROWS_AS(wrong_size.load_state(saved), Error);
  CHECK_THROWS_AS(LoaderState::parse("epoch=1 position=2"), Error);
  CHECK_THROWS_AS(LoaderState::parse("epoch=1 position=x seed=1 dataset_size=5"), Error);
  CHECK_THROWS_AS(LoaderState::parse("epoch=1 position=2 seed=-1 dataset_size=5"), Error);
  // Strictly decimal, each key once, the epoch in range.
  for (const char* bad :
       {"epoch=+1 position=2 seed=1 dataset_size=5", "epoch=1e3 position=2 seed=1 dataset_size=5",
        "epoch=1 position=2 seed=0x10 dataset_size=5",
        "epoch=1 position=2 seed=1 dataset_size=5 epoch=2",
        "epoch=1\tposition=2 seed=1 dataset_size=5",
        "epoch=9007199254740993 position=2 seed=1 dataset_size=5",
        "epoch=99999999999999999999 position=2 seed=1 dataset_size=5"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(LoaderState::parse(bad), Error);
  }
  CHECK(LoaderState::parse("epoch=9007199254740992 position=2 seed=18446744073709551615 "
                           "dataset_size=5")
            .seed == 18446744073709551615ULL);
  CHECK_THROWS_AS(LoaderState::from_tensor(zeros({3}, {.dtype = DType::int64})), Error);
}

// --- ListOps ---

TEST_CASE("ListOps evaluation matches LRA's definitions") {
  CHECK(eval("[MAX 2 9 [MIN 4 7 ] 0 ]") == 9);
  CHECK(eval("[MIN 3 [MAX 1 8 ] 5 ]") == 3);
  CHECK(eval("[SM 9 8 7 ]") == 4);                    // 24 mod 10
  CHECK(eval("[MED 7 1 5 ]") == 5);                   // odd count: the middle value
  CHECK(eval("[MED 4 1 9 2 ]") == 3);                 // even: (2 + 4) / 2
  CHECK(eval("[MED 1 2 ]") == 1);                     // int(1.5)
  CHECK(eval("[MED 3 8 ]") == 5);                     // int(5.5)
  CHECK(eval("[MED 9 9 0 0 ]") == 4);                 // int(4.5)
  CHECK(eval("[SM [MED 2 7 ] [MAX 1 3 ] 6 ]") == 3);  // 4 + 3 + 6 = 13
  CHECK(eval("7") == 7);
  CHECK(eval("( ( ( [MAX 2 ) 9 ) ] )") == 9);  // LRA's parenthesised form
  CHECK(format_listops(ids("[MAX 2  9 [MIN 4 7 ] 0 ]")) == "[MAX 2 9 [MIN 4 7 ] 0 ]");
  CHECK(ListOpsVocab::token_string(ListOpsVocab::sm_id) == "[SM");
}

TEST_CASE("ListOps rejects malformed expressions") {
  CHECK(contains(error_of([] { eval("[MAX 2 9"); }), "not closed"));
  CHECK(contains(error_of([] { eval("] 3"); }), "no open operator"));
  CHECK(contains(error_of([] { eval("3 4"); }), "follows a complete expression"));
  CHECK(contains(error_of([] { eval("[MIN ]"); }), "no arguments"));
  CHECK(contains(error_of([] { eval("[FIRST 1 2 ]"); }), "'[FIRST'"));
  CHECK_THROWS_AS(eval(""), Error);
  const std::vector<std::uint8_t> with_pad = {static_cast<std::uint8_t>(ListOpsVocab::pad_id)};
  CHECK_THROWS_AS(evaluate_listops(with_pad), Error);
}

namespace {
// Checks the structure LRA's generator produces: depth, arity, bounds and the label.
void check_generated(const std::vector<ListOpsExample>& examples, const ListOpsOptions& o) {
  for (const ListOpsExample& e : examples) {
    const auto n = static_cast<std::int64_t>(e.tokens.size());
    REQUIRE(n >= o.min_len);
    REQUIRE(n <= o.max_len);
    REQUIRE(e.label >= 0);
    REQUIRE(e.label <= 9);
    REQUIRE(evaluate_listops(e.tokens) == e.label);
    std::vector<std::int64_t> arity;  // arguments so far of each open operator
    std::int64_t deepest = 0;
    for (const std::uint8_t id : e.tokens) {
      if (ListOpsVocab::is_operator(id)) {
        if (!arity.empty()) ++arity.back();
        arity.push_back(0);
        deepest = std::max(deepest, static_cast<std::int64_t>(arity.size()));
      } else if (id == ListOpsVocab::close_id) {
        REQUIRE(arity.back() >= 2);
        REQUIRE(arity.back() <= o.max_args);
        arity.pop_back();
      } else if (!arity.empty()) {
        ++arity.back();
      }
    }
    REQUIRE(deepest <= o.max_depth - 1);  // operators only above the last level
  }
}
}  // namespace

TEST_CASE("ListOps generation: bounds, labels, structure, determinism") {
  const ListOpsOptions options = ListOpsOptions::short_sequences();
  const auto examples = generate_listops(150, options, 1);
  REQUIRE(examples.size() == 150);
  check_generated(examples, options);
  std::set<std::string> distinct;  // (a set of byte vectors trips a GCC 12 false warning)
  std::set<std::int64_t> labels;
  for (const auto& e : examples) {
    distinct.insert(format_listops(e.tokens));
    labels.insert(e.label);
  }
  CHECK(distinct.size() == 150);
  CHECK(labels.size() >= 8);  // the values spread over the classes

  const auto again = generate_listops(40, options, 1);  // a prefix of the larger draw
  for (std::size_t i = 0; i < again.size(); ++i) CHECK(again[i].tokens == examples[i].tokens);
  CHECK(generate_listops(1, options, 2)[0].tokens != examples[0].tokens);

  const auto lra = generate_listops(10, {}, 3);  // LRA's lengths, 500..2000
  check_generated(lra, ListOpsOptions{});

  const auto splits = generate_listops_splits(20, 5, 5, options, 1);
  CHECK(splits.train.size() == 20);
  CHECK(splits.validation[0].tokens == examples[20].tokens);
  CHECK(splits.test[4].tokens == examples[29].tokens);
}

TEST_CASE("ListOps generation rejects impossible options") {
  CHECK(contains(error_of([] { generate_listops(1, {.min_len = 500, .max_depth = 2}); }),
                 "no expression reaches"));
  CHECK_THROWS_AS(generate_listops(1, {.min_len = 10, .max_len = 5}), Error);
  CHECK_THROWS_AS(generate_listops(1, {.max_args = 1}), Error);
  // Only 4 * 10 * 10 distinct expressions of length 4 exist at depth 2 with 2 arguments.
  const ListOpsOptions tiny{
      .min_len = 4, .max_len = 4, .max_depth = 2, .max_args = 2, .max_attempts = 20000};
  CHECK(contains(error_of([&] { generate_listops(500, tiny); }), "found only"));
}

TEST_CASE("ListOps batches") {
  const std::vector<ListOpsExample> examples = {{ids("[MAX 2 9 ]"), 9}, {ids("3"), 3}};
  const ListOpsBatch b = listops_batch(examples, {1, 0});
  REQUIRE(b.tokens.shape() == Shape{2, 5});
  CHECK(b.tokens.to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{1, 5, 0, 0, 0, 1, 13, 4, 11, 16});
  CHECK(b.padding_mask.to_vector<bool>() ==
        std::vector<bool>{false, false, true, true, true, false, false, false, false, false});
  CHECK(b.labels.to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 9});
  CHECK(listops_batch(examples, {0}, 8, false).tokens.shape() == Shape{1, 8});
  CHECK(contains(error_of([&] { listops_batch(examples, {0}, 3); }), "listops_batch"));
  CHECK_THROWS_AS(listops_batch(examples, {2}), Error);
}

TEST_CASE("ListOps files round-trip and bad lines name the file and line") {
  TempDir dir("listops");
  const auto examples = generate_listops(30, ListOpsOptions::short_sequences(), 4);
  const fs::path file = dir.path / "basic_train.tsv";
  write_listops_tsv(file, examples);
  const auto read = read_listops_tsv(file);
  REQUIRE(read.size() == examples.size());
  for (std::size_t i = 0; i < read.size(); ++i) {
    CHECK(read[i].tokens == examples[i].tokens);
    CHECK(read[i].label == examples[i].label);
  }
  std::ifstream in(file);
  std::string header;
  std::getline(in, header);
  CHECK(header == "Source\tTarget");

  // LRA's own layout: parentheses and CRLF line ends.
  const auto lra = dir.write("lra.tsv", "Source\tTarget\r\n( ( ( [MAX 2 ) 9 ) ] )\t9\r\n");
  CHECK(read_listops_tsv(lra)[0].label == 9);

  const auto check_bad = [&](const std::string& name, const std::string& content,
                             const std::string& line, const std::string& reason) {
    const fs::path bad = dir.write(name, content);
    const std::string message = error_of([&] { read_listops_tsv(bad); });
    CHECK(contains(message, name));
    CHECK(contains(message, line));
    CHECK(contains(message, reason));
  };
  check_bad("no_header.tsv", "[MAX 2 9 ]\t9\n", "line 1", "header");
  check_bad("token.tsv", "Source\tTarget\n[MAX 2 9 ]\t9\n[MAX 2 x ]\t9\n", "line 3", "'x'");
  check_bad("label.tsv", "Source\tTarget\n[MAX 2 9 ]\t4\n", "line 2", "evaluates to 9");
  check_bad("digit.tsv", "Source\tTarget\n[MAX 2 9 ]\t10\n", "line 2", "not a digit");
  check_bad("fields.tsv", "Source\tTarget\n[MAX 2 9 ]\t9\t1\n", "line 2", "two tab-separated");
  check_bad("open.tsv", "Source\tTarget\n[MAX 2 9\t9\n", "line 2", "not closed");
  check_bad("empty.tsv", "", "", "is empty");
  CHECK(contains(error_of([&] { read_listops_tsv(dir.path / "missing.tsv"); }),
                 "not an existing file"));
}

TEST_CASE("a sharded loader: each process a disjoint slice, together the unsharded batch") {
  // 3 processes, global batch 6, 40 examples: 6 full batches and a last one of 4 per epoch.
  const LoaderOptions base{.batch_size = 6, .seed = 5};
  Loader whole(40, base);
  std::vector<Loader> shards;
  for (std::int64_t r = 0; r < 3; ++r) {
    LoaderOptions o = base;
    o.rank = r;
    o.world_size = 3;
    shards.emplace_back(40, o);
  }
  for (int step = 0; step < 16; ++step) {  // more than two epochs
    const LoaderBatch expected = whole.next();
    std::vector<std::int64_t> joined;
    for (Loader& shard : shards) {
      const LoaderBatch b = shard.next();
      CHECK(b.epoch == expected.epoch);
      CHECK(b.step == expected.step);
      CHECK(b.global_size == static_cast<std::int64_t>(expected.indices.size()));
      // Full batches split evenly: 2 each; the epoch's last batch of 4 as 1, 1, 2.
      if (expected.indices.size() == 6) CHECK(b.indices.size() == 2);
      joined.insert(joined.end(), b.indices.begin(), b.indices.end());
    }
    CHECK(joined == expected.indices);  // disjoint, in the unsharded order
  }
  // The position is the global one: a state saved by a shard resumes the unsharded loader (and
  // any other sharding of the same global batch).
  CHECK(shards[1].state() == whole.state());
  Loader resumed(40, base);
  resumed.load_state(shards[2].state());
  CHECK(resumed.next().indices == whole.next().indices);
}

TEST_CASE("a sharded loader refuses a batch that does not split and a rank out of range") {
  CHECK_THROWS_WITH_AS(Loader(40, {.batch_size = 6, .rank = 0, .world_size = 4}),
                       "Loader: batch_size 6 does not split evenly over 4 processes; use a "
                       "multiple of 4",
                       Error);
  CHECK_THROWS_WITH_AS(Loader(40, {.batch_size = 6, .rank = 2, .world_size = 2}),
                       "Loader: expected 0 <= rank < world_size, got rank 2 of world_size 2",
                       Error);
}
