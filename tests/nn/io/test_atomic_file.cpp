// AtomicFile, the one writer of the library's files: whole files or nothing, the replaced file's
// mode kept, special files refused and left as they are, failures explained with the system's
// reason; and check_outputs_distinct, which compares outputs with inputs by file identity.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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
           ("tinyformer_atomic_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  // The names in the directory, to see that no temporary file is left.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_plain(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// Files of this process may grow to `bytes` only, while it lives: a write beyond fails with
// EFBIG ("File too large") instead of raising SIGXFSZ.
struct FileSizeLimit {
  rlimit saved{};
  struct sigaction saved_action {};
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    REQUIRE(::sigaction(SIGXFSZ, &ignore, &saved_action) == 0);
    rlimit limit = saved;
    limit.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved);
    ::sigaction(SIGXFSZ, &saved_action, nullptr);
  }
};

}  // namespace

TEST_CASE("AtomicFile replaces a file whole and leaves no temporary") {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  nn::write_file_atomically(path, "first\n", "test");
  CHECK(read_all(path) == "first\n");
  {
    nn::AtomicFile file(path, "test");
    file.write("sec");
    file.write(std::string("ond\n"));
    CHECK(read_all(path) == "first\n");  // the old file until the commit
    file.commit();
  }
  CHECK(read_all(path) == "second\n");
  {
    nn::AtomicFile file(path, "test");
    file.write("never committed");
  }  // an exception or an early return: the temporary goes, the file stays
  CHECK(read_all(path) == "second\n");
  CHECK(dir.names() == std::vector<std::string>{"out.txt"});
}

TEST_CASE("AtomicFile keeps the mode of the file it replaces; a new file follows the umask") {
  TempDir dir;
  const std::string path = dir.file("secret.safetensors");
  write_plain(path, "old");
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  nn::write_file_atomically(path, "new", "test");
  CHECK(read_all(path) == "new");
  CHECK(mode_of(path) == 0600);
  REQUIRE(::chmod(path.c_str(), 0640) == 0);
  nn::save_safetensors(path, {{"w", ones({2})}});
  CHECK(mode_of(path) == 0640);

  const mode_t mask = ::umask(022);
  nn::write_file_atomically(dir.file("fresh.txt"), "x", "test");
  ::umask(mask);
  CHECK(mode_of(dir.file("fresh.txt")) == 0644);

  // Through a symbolic link: the target keeps its mode, the link stays a link.
  fs::create_symlink(path, dir.file("link"));
  nn::write_file_atomically(dir.file("link"), "via link", "test");
  CHECK(fs::is_symlink(dir.file("link")));
  CHECK(read_all(path) == "via link");
  CHECK(mode_of(path) == 0640);
}

TEST_CASE("AtomicFile refuses a FIFO and a character device and leaves them as they are") {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(
      nn::write_file_atomically(fifo, "x", "--log " + fifo),
      doctest::Contains(
          ("--log " + fifo + ": not a regular file but a FIFO; refusing to replace it").c_str()),
      Error);
  CHECK(fs::is_fifo(fifo));
  CHECK_THROWS_WITH_AS(nn::AtomicFile(fifo, "test"), doctest::Contains("a FIFO"), Error);
  CHECK(fs::is_fifo(fifo));

  // A character device made here (the numbers of /dev/full); making one needs CAP_MKNOD.
  const std::string node = dir.file("node");
  if (::mknod(node.c_str(), S_IFCHR | 0600, makedev(1, 7)) == 0) {
    CHECK_THROWS_WITH_AS(nn::write_file_atomically(node, "x", "--plot " + node),
                         doctest::Contains("not a regular file but a character device"), Error);
    CHECK(fs::is_character_file(node));
  } else {
    MESSAGE("mknod is not permitted here: the device case runs on a link to /dev/null only");
  }
  fs::create_symlink("/dev/null", dir.file("null_link"));
  CHECK_THROWS_WITH_AS(nn::write_file_atomically(dir.file("null_link"), "x", "test"),
                       doctest::Contains("a character device"), Error);
  CHECK(fs::is_character_file("/dev/null"));
  fs::create_directories(dir.file("sub"));
  CHECK_THROWS_WITH_AS(nn::write_file_atomically(dir.file("sub"), "x", "test"),
                       doctest::Contains("a directory"), Error);
  // No temporary beside any of them.
  for (const std::string& name : dir.names()) CHECK(name.find(".tmp.") == std::string::npos);
}

TEST_CASE("AtomicFile's errors give the system's reason and remove the temporary") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(nn::write_file_atomically(dir.file("missing/out.txt"), "x", "test"),
                       doctest::Contains(("cannot write to the directory '" + dir.file("missing") +
                                          "': No such file or directory")
                                             .c_str()),
                       Error);
  if (::geteuid() != 0) {  // root writes into a read-only directory all the same
    fs::create_directories(dir.file("read_only"));
    fs::permissions(dir.file("read_only"), fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_WITH_AS(nn::write_file_atomically(dir.file("read_only/out.txt"), "x", "test"),
                         doctest::Contains("Permission denied"), Error);
  }
  // A write that fails midway: the old file stays, no temporary is left, and the message says
  // what the system said.
  const std::string path = dir.file("big.txt");
  write_plain(path, "old");
  {
    const FileSizeLimit limit(64);
    CHECK_THROWS_WITH_AS(nn::write_file_atomically(path, std::string(1000, 'x'), "test"),
                         doctest::Contains("failed: File too large"), Error);
  }
  CHECK(read_all(path) == "old");
  CHECK(dir.names() == std::vector<std::string>{"big.txt"});
}

TEST_CASE("CsvLogger writes through AtomicFile: special files refused, reasons given") {
  TempDir dir;
  const std::string fifo = dir.file("fifo.csv");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(nn::CsvLogger(fifo, {"step"}), doctest::Contains("a FIFO"), Error);
  // resume() reads the old log first: a FIFO is refused before it is opened (no wait).
  CHECK_THROWS_WITH_AS(nn::CsvLogger::resume(fifo, {"step"}, 3), doctest::Contains("a FIFO"),
                       Error);
  CHECK(fs::is_fifo(fifo));
  CHECK_THROWS_WITH_AS(nn::CsvLogger(dir.file("missing/log.csv"), {"step"}),
                       doctest::Contains("No such file or directory"), Error);

  const std::string log_path = dir.file("log.csv");
  write_plain(log_path, "old");
  REQUIRE(::chmod(log_path.c_str(), 0600) == 0);
  nn::CsvLogger log(log_path, {"step", "loss"});
  CHECK(mode_of(log_path) == 0600);
  {
    const FileSizeLimit limit(32);
    log.row({1, 2});
    CHECK_THROWS_WITH_AS(
        log.row({123456789, 0.123456789}),
        doctest::Contains(
            ("CsvLogger: writing to " + log_path + " failed: File too large").c_str()),
        Error);
  }
}

TEST_CASE("plots and ListOps files are written through AtomicFile") {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Refused before gnuplot runs (so whether it is installed does not matter).
  CHECK_THROWS_WITH_AS(
      nn::gnuplot_png(fifo, 100, 100, "plot x\n", "plot_test"),
      doctest::Contains(("plot_test: " + fifo + ": not a regular file but a FIFO").c_str()), Error);
  CHECK_THROWS_WITH_AS(nn::data::write_listops_tsv(fifo, {}), doctest::Contains("a FIFO"), Error);
  CHECK(fs::is_fifo(fifo));
  // A plot may not replace one of the logs it draws.
  write_plain(dir.file("run.csv"), "step,loss,val\n1,2,3\n");
  CHECK_THROWS_WITH_AS(nn::plot_logs(dir.file("./run.csv"), {dir.file("run.csv")}, "val", "val"),
                       doctest::Contains("is the same file as the log"), Error);
  CHECK(read_all(dir.file("run.csv")) == "step,loss,val\n1,2,3\n");

  const std::string tsv = dir.file("basic_val.tsv");
  write_plain(tsv, "old");
  REQUIRE(::chmod(tsv.c_str(), 0600) == 0);
  nn::data::write_listops_tsv(tsv, {});
  CHECK(read_all(tsv) == "Source\tTarget\n");
  CHECK(mode_of(tsv) == 0600);
}

TEST_CASE("check_outputs_distinct compares files by identity, not by name") {
  TempDir dir;
  const std::string data = dir.file("d.txt");
  write_plain(data, "text");
  auto refused = [&](const std::vector<nn::NamedPath>& inputs,
                     const std::vector<nn::NamedPath>& outputs, const std::string& needle) {
    CHECK_THROWS_WITH_AS(nn::check_outputs_distinct(inputs, outputs),
                         doctest::Contains(needle.c_str()), Error);
  };
  refused({{"--data", data}}, {{"--checkpoint", ""}, {"--log", data}},
          "--log " + data + " is the same file as --data " + data +
              ": writing it would destroy that input");
  // Other spellings of the same file, through a directory that does not exist yet too.
  refused({{"--data", data}}, {{"--plot", dir.file("new/../d.txt")}}, "is the same file");
  fs::create_directories(dir.file("sub"));
  refused({{"--data", data}}, {{"--plot", dir.file("sub/../d.txt")}}, "--plot ");
  fs::create_symlink(data, dir.file("link.txt"));
  refused({{"--data", dir.file("link.txt")}}, {{"--checkpoint", data}}, "--checkpoint ");
  fs::create_hard_link(data, dir.file("hard.txt"));
  refused({{"--data", data}}, {{"--log", dir.file("hard.txt")}}, "--log ");
  // Two outputs, neither existing yet.
  refused({}, {{"--log", dir.file("new.csv")}, {"--plot", dir.file("sub/../new.csv")}},
          "--log " + dir.file("new.csv") + " and --plot " + dir.file("sub/../new.csv") +
              " are the same file");
  // An output inside an input directory, through a link to the directory too.
  refused({{"--data", dir.file("sub")}}, {{"--log", dir.file("sub/run.csv")}},
          "lies inside --data " + dir.file("sub"));
  fs::create_directory_symlink(dir.file("sub"), dir.file("sub_link"));
  refused({{"--data", dir.file("sub")}}, {{"--log", dir.file("sub_link/deeper/run.csv")}},
          "lies inside");

  // Distinct files pass, and nothing is written.
  nn::check_outputs_distinct({{"--data", data}, {"--data", dir.file("sub")}},
                             {{"--checkpoint", dir.file("run.safetensors")},
                              {"--log", dir.file("run.csv")},
                              {"--plot", ""},
                              {"--plot2", ""}});
  CHECK_FALSE(fs::exists(dir.file("run.csv")));
  CHECK(read_all(data) == "text");
}
