// The library's helpers for training programs: flag checks, devices, output paths, error
// reports, the split corpus with its fingerprint, and the masked-LM validation set and loss.
#include <doctest/doctest.h>

#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("tinyformer_program_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path file(const std::string& name) const { return path / name; }
};

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// What report_error prints, through a temporary stderr.
std::string reported(std::exception_ptr error, const std::string& hint = "") {
  std::fflush(stderr);
  std::FILE* capture = std::tmpfile();
  const int saved = ::dup(::fileno(stderr));
  ::dup2(::fileno(capture), ::fileno(stderr));
  const int status = nn::report_error("prog", error, hint);
  std::fflush(stderr);
  ::dup2(saved, ::fileno(stderr));
  ::close(saved);
  CHECK(status == 1);
  std::rewind(capture);
  std::string text;
  for (int c = std::fgetc(capture); c != EOF; c = std::fgetc(capture)) text += static_cast<char>(c);
  std::fclose(capture);
  return text;
}

template <typename E>
std::exception_ptr as_ptr(const E& e) {
  return std::make_exception_ptr(e);
}

}  // namespace

TEST_CASE("flag checks accept finite numbers in range and say what is wrong otherwise") {
  CHECK(nn::flags::positive()("0.5") == "");
  CHECK(nn::flags::positive()("1e-3") == "");
  CHECK(nn::flags::positive()("0") == "expected a value above 0, got 0");
  CHECK(nn::flags::positive()("-1") == "expected a value above 0, got -1");
  CHECK(nn::flags::non_negative()("0") == "");
  CHECK(nn::flags::non_negative()("-0.1") == "expected a value of 0 or more, got -0.1");
  CHECK(nn::flags::in_range(0.001, 0.5)("0.5") == "");
  CHECK(nn::flags::in_range(0.001, 0.5)("0.6") == "expected a value from 0.001 to 0.5, got 0.6");
  CHECK(nn::flags::in_range(0, 1.7976931348623157e308)("-1") ==
        "expected a value from 0 to 1.79769e+308, got -1");
  CHECK(nn::flags::positive()("inf") == "expected a finite number, got inf");
  CHECK(nn::flags::non_negative()("nan") == "expected a finite number, got nan");
  CHECK(nn::flags::positive()("abc") == "expected a number, got 'abc'");
  CHECK(nn::flags::positive()("3x") == "expected a number, got '3x'");
  CHECK(nn::flags::positive()("") == "expected a number, got ''");
  CHECK(nn::flags::positive().description == "POSITIVE");
}

TEST_CASE("integer checks read plain decimal whole numbers in range, and quote 20 characters") {
  const nn::flags::IntegerCheck positive = nn::flags::integer(1);
  const nn::flags::IntegerCheck seed = nn::flags::integer(0, UINT64_MAX);
  const nn::flags::IntegerCheck any = nn::flags::integer(INT64_MIN);
  std::string canonical;
  CHECK(positive("32", &canonical) == "");
  CHECK(canonical == "32");
  CHECK(positive("010", &canonical) == "");  // decimal, not octal
  CHECK(canonical == "10");
  CHECK(seed("18446744073709551615", &canonical) == "");
  CHECK(canonical == "18446744073709551615");
  CHECK(any("-9223372036854775808", &canonical) == "");
  CHECK(canonical == "-9223372036854775808");
  CHECK(any("-007", &canonical) == "");
  CHECK(canonical == "-7");
  CHECK(positive("0") == "out of range: expected a whole number of 1 or more, got '0'");
  CHECK(seed("-1") ==
        "out of range: expected a whole number from 0 to 18446744073709551615, got '-1'");
  CHECK(seed("-0") != "");
  CHECK(seed("18446744073709551616") != "");
  CHECK(any("-9223372036854775809") ==
        "out of range: expected a whole number of -9223372036854775808 or more, got "
        "'-9223372036854775809'");
  CHECK(any("9223372036854775808") != "");
  CHECK(nn::flags::integer(0, 256)("257") ==
        "out of range: expected a whole number from 0 to 256, got '257'");
  const std::string nines(300, '9');
  CHECK(positive(nines) ==
        "out of range: expected a whole number of 1 or more, got '99999999999999999999...'");
  CHECK(positive("1" + std::string(300, 'x')) ==
        "expected a whole number, got '1xxxxxxxxxxxxxxxxxxx...'");
  for (const char* bad : {"", "-", "+5", " 5", "5 ", "1e3", "0x10", "5.0", "abc", "1\n"}) {
    CAPTURE(bad);
    canonical = "unchanged";
    CHECK(positive(bad, &canonical).starts_with("expected a whole number, got '"));
    CHECK(canonical == "unchanged");
  }
  CHECK(positive.description == "POSITIVE");
  CHECK(nn::flags::integer(0).description == "NONNEGATIVE");
  CHECK(nn::flags::integer(0, 9).description == "IN [0, 9]");
  // The number checks quote as much, and no more.
  CHECK(nn::flags::positive()(nines + "x") == "expected a number, got '99999999999999999999...'");
  CHECK(nn::flags::quoted("short") == "'short'");
  CHECK(nn::flags::shortened(std::string(25, 'a')) == "aaaaaaaaaaaaaaaaaaaa...");
}

TEST_CASE("usable_device and check_writable refuse with the flag's name") {
  CHECK(nn::usable_device("cpu") == Device::cpu());
  CHECK_THROWS_WITH_AS(nn::usable_device("tpu", "--on"), doctest::Contains("--on: "),
                       nn::UsageError);
  if (!cuda_available()) {
    CHECK_THROWS_WITH_AS(nn::usable_device("cuda"),
                         doctest::Contains("--device cuda: no usable CUDA device"), nn::UsageError);
  }
  TempDir dir;
  nn::check_writable("", "--log");  // nothing asked for
  nn::check_writable((dir.path / "new" / "sub" / "run.csv").string(), "--log");
  CHECK(fs::is_directory(dir.path / "new" / "sub"));
  write(dir.file("plain"), "x");
  CHECK_THROWS_WITH_AS(nn::check_writable((dir.file("plain") / "run.csv").string(), "--log"),
                       doctest::Contains("--log "), nn::UsageError);
}

TEST_CASE("report_error prints one line that says what to do") {
  CHECK(reported(as_ptr(nn::UsageError("--lr: bad\nvalue"))) == "prog: --lr: bad value\n");
  CHECK(reported(as_ptr(Error("matmul: shapes"))) == "prog: matmul: shapes\n");
  CHECK(reported(as_ptr(OutOfMemory("out of memory: 1 TB")), "; lower --batch") ==
        "prog: out of memory: 1 TB; lower --batch\n");
  CHECK(reported(as_ptr(std::bad_alloc()), "; lower --batch") ==
        "prog: out of host memory; lower --batch\n");
  CHECK(reported(as_ptr(fs::filesystem_error("cannot", std::error_code())))
            .find("check that the path exists") != std::string::npos);
  CHECK(reported(as_ptr(std::logic_error("oops"))) ==
        "prog: unexpected error, a bug to report with the command line: oops\n");
  CHECK(reported(as_ptr(42)) ==
        "prog: unexpected error of an unknown type, a bug to report with the command line\n");
}

TEST_CASE("load_split_corpus splits each text file and skips what is not text") {
  TempDir dir;
  write(dir.file("b.txt"), "bbbbbbbbbB");
  write(dir.file("a.txt"), "aaaaaaaaaA");
  write(dir.file("a.dat"), std::string("\0\1\2binary", 9));
  write(dir.file(".hidden"), "hhhhhhhhhH");
  write(dir.file("empty"), "");
  fs::create_symlink(dir.file("a.txt"), dir.file("a.u8"));
  const nn::data::SplitCorpus corpus = nn::data::load_split_corpus(dir.path, 0.1);
  CHECK(corpus.files == 2);
  CHECK(corpus.bytes == 20);
  CHECK(corpus.split.train == "aaaaaaaaa\nbbbbbbbbb");
  CHECK(corpus.split.validation == "A\nB");
  // One file is split_text of that file.
  const nn::data::SplitCorpus one = nn::data::load_split_corpus(dir.file("a.txt"), 0.1);
  CHECK(one.split.train == "aaaaaaaaa");
  CHECK(one.split.validation == "A");
  fs::create_directories(dir.file("nothing"));
  write(dir.file("nothing") / "x.bin", std::string("\0", 1));
  CHECK_THROWS_WITH_AS(nn::data::load_split_corpus(dir.file("nothing"), 0.1),
                       doctest::Contains("holds no non-empty text files"), Error);
  CHECK_THROWS_WITH_AS(nn::data::load_split_corpus(dir.file("missing.txt"), 0.1),
                       doctest::Contains("does not exist"), Error);

  CHECK(nn::data::text_fingerprint("") == "811c9dc5");  // FNV-1a's offset basis
  CHECK(nn::data::text_fingerprint("a") == "e40c292c");
  CHECK(nn::data::text_fingerprint("ab") != nn::data::text_fingerprint("ba"));
}

TEST_CASE("the masked-LM validation set is fixed, and its loss is the mean over targets") {
  std::vector<std::int64_t> stream;
  for (int i = 0; i < 400; ++i) stream.push_back(nn::data::ByteTokenizer::byte_id('a' + i % 26));
  const nn::data::TokenChunks chunks(stream, 16);  // 25 sequences
  const nn::data::MlmConfig mlm;
  const nn::MlmValidationSet set = nn::mlm_validation_set(chunks, 10, 4, mlm, 9);
  CHECK(set.sequences == 10);
  REQUIRE(set.batches.size() == 3);  // 4 + 4 + 2
  CHECK(set.batches[2].tokens.size(0) == 2);
  std::int64_t targets = 0;
  for (const auto& b : set.batches) {
    for (std::int64_t label : b.labels.to_vector<std::int64_t>()) targets += label != -100;
  }
  CHECK(targets == set.targets);
  CHECK(set.targets > 0);
  // The same arguments, the same set.
  const nn::MlmValidationSet again = nn::mlm_validation_set(chunks, 10, 4, mlm, 9);
  for (std::size_t i = 0; i < set.batches.size(); ++i) {
    CHECK(set.batches[i].tokens.to_vector<std::int64_t>() ==
          again.batches[i].tokens.to_vector<std::int64_t>());
  }
  // More sequences asked for than there are: all of them.
  CHECK(nn::mlm_validation_set(chunks, 100, 8, mlm, 9).sequences == 25);

  manual_seed(1);
  auto model = std::make_shared<nn::MaskedLM>(
      nn::EncoderConfig{
          .layers = 1, .d_model = 16, .heads = 2, .d_ff = 32, .max_seq_len = 16, .dropout = 0.5},
      nn::data::ByteTokenizer::vocab_size);
  // By hand: the summed cross-entropy over every batch's targets, over the targets.
  double total = 0;
  {
    NoGradGuard no_grad;
    model->eval();
    for (const auto& b : set.batches) {
      total += cross_entropy(model->forward(b.tokens).reshape({-1, 260}), b.labels.reshape({-1}),
                             -100, Reduction::sum)
                   .item<double>();
    }
    model->train();
  }
  const double loss = nn::mlm_validation_loss(*model, set, Device::cpu());
  CHECK(loss == doctest::Approx(total / static_cast<double>(set.targets)).epsilon(1e-12));
  CHECK(model->is_training());  // the mode is left as it was
  model->eval();
  CHECK(nn::mlm_validation_loss(*model, set, Device::cpu()) == loss);  // dropout off both times
  CHECK_FALSE(model->is_training());
}
