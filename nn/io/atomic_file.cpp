// AtomicFile: a temporary file, synced and renamed over its target, keeping the target's mode and
// owner; and the path checks made before any file is read or replaced.
#include "nn/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "core/error.h"

namespace tinyformer::nn {

namespace {

std::string errno_text(int error) {
  return std::strerror(error);
}

std::filesystem::path directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

// Removes "<path>.tmp.<pid>" files whose process no longer exists: what a write killed midway
// leaves behind. A live process's file (another process writing the same path, or a reused pid)
// is left alone, as is anything that is not a regular file.
void remove_stale_temporaries(const std::string& path) {
  const std::filesystem::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (std::filesystem::directory_iterator it(directory_of(path), ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    pid_t pid = 0;
    const auto [rest, parse_ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (parse_ec != std::errc() || rest != digits.data() + digits.size() || pid <= 0) continue;
    if (pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    (void)::unlink(it->path().c_str());
  }
}

void check_directory_writable(const std::string& file, const std::string& where) {
  const std::filesystem::path dir = directory_of(file);
  if (::access(dir.c_str(), W_OK) != 0) {
    const int error = errno;
    fail(where, ": cannot write to the directory '", dir.string(), "': ", errno_text(error));
  }
}

}  // namespace

const char* file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

std::string check_file_path(const std::string& path, bool for_saving, const std::string& where) {
  TF_CHECK(!path.empty(), where, ": an empty path");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const int error = errno;
    TF_CHECK(error == ENOENT, where, ": cannot stat: ", errno_text(error));
    if (for_saving) check_directory_writable(path, where);
    return path;
  }
  std::string target = path;
  if (S_ISLNK(st.st_mode)) {
    // Saving follows the link: the file it points to is replaced, the link stays.
    std::unique_ptr<char, decltype(&std::free)> resolved(::realpath(path.c_str(), nullptr),
                                                         &std::free);
    const int error = errno;
    TF_CHECK(resolved != nullptr, where, ": a symbolic link that cannot be followed (",
             errno_text(error), "); remove it or point it at a regular file");
    target = resolved.get();
    if (::stat(target.c_str(), &st) != 0) {
      const int stat_error = errno;
      fail(where, ": cannot stat ", target, ": ", errno_text(stat_error));
    }
  }
  const std::string shown = target == path ? std::string() : " (a symbolic link to " + target + ")";
  TF_CHECK(S_ISREG(st.st_mode), where, shown, ": not a regular file but ", file_kind(st.st_mode),
           for_saving ? "; refusing to replace it" : "");
  if (for_saving) check_directory_writable(target, where);
  return target;
}

AtomicFile::AtomicFile(const std::string& path, std::string where) : where_(std::move(where)) {
  target_ = check_file_path(path, /*for_saving=*/true, where_);
  remove_stale_temporaries(target_);
  temporary_ = target_ + ".tmp." + std::to_string(::getpid());
  // O_NOFOLLOW and O_NONBLOCK: whatever is at the temporary name (a link, a FIFO) is not written
  // through or waited on; a regular file there is ours (this pid) and is replaced. 0666: the
  // umask decides a new file's mode, as for any program's output; commit() copies an old one's.
  fd_ = ::open(temporary_.c_str(),
               O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
  if (fd_ < 0) {
    const int error = errno;
    fail(where_, ": cannot create the temporary file ", temporary_, ": ", errno_text(error));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(where_, ": ", temporary_, " is not a regular file; remove it");
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) (void)::unlink(temporary_.c_str());
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  TF_CHECK(fd_ >= 0, where_, ": AtomicFile::write after commit");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      fail(where_, ": writing ", temporary_, " failed: ", errno_text(error));
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  TF_CHECK(fd_ >= 0, where_, ": AtomicFile::commit called twice");
  // The bytes must be on disk before the rename makes them the file; otherwise a crash could
  // leave a renamed but empty file.
  if (::fsync(fd_) != 0) {
    const int error = errno;
    fail(where_, ": syncing ", temporary_, " to disk failed: ", errno_text(error));
  }
  struct stat existing {};
  if (::lstat(target_.c_str(), &existing) == 0) {
    TF_CHECK(S_ISREG(existing.st_mode), where_, ": ", target_, " is now ",
             file_kind(existing.st_mode), ", not a regular file; refusing to replace it");
    struct stat mine {};
    if (::fstat(fd_, &mine) != 0) {
      const int error = errno;
      fail(where_, ": cannot stat ", temporary_, ": ", errno_text(error));
    }
    // The owner first: changing it clears the set-user-ID and set-group-ID bits. A process may
    // only give its files away as root (or to a group it is in): then the file becomes its own,
    // without those bits.
    bool owner_kept = existing.st_uid == mine.st_uid && existing.st_gid == mine.st_gid;
    if (!owner_kept) {
      owner_kept = ::fchown(fd_, existing.st_uid, existing.st_gid) == 0;
      const int error = errno;
      TF_CHECK(owner_kept || error == EPERM, where_, ": cannot give ", temporary_, " the owner of ",
               target_, ": ", errno_text(error));
    }
    const mode_t mode = existing.st_mode & (owner_kept ? 07777 : 0777);
    if (::fchmod(fd_, mode) != 0) {
      const int error = errno;
      fail(where_, ": cannot give ", temporary_, " the mode of ", target_, ": ", errno_text(error));
    }
  } else if (errno != ENOENT) {
    const int error = errno;
    fail(where_, ": cannot stat ", target_, ": ", errno_text(error));
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const int error = errno;
    fail(where_, ": closing ", temporary_, " failed: ", errno_text(error));
  }
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    fail(where_, ": cannot rename ", temporary_, " to ", target_, ": ", errno_text(error));
  }
  committed_ = true;
  // Makes the rename itself durable. The file is already complete and in place, and some
  // filesystems refuse to sync a directory, so a failure here is not reported.
  const int dir_fd = ::open(directory_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_file_atomically(const std::string& path, std::string_view contents,
                           const std::string& where) {
  AtomicFile file(path, where);
  file.write(contents);
  file.commit();
}

}  // namespace tinyformer::nn
