// Atomic file replacement: the one way the library writes a file (checkpoints, CSV logs, plots,
// ListOps data, exported CSVs), and the checks it makes on a path before writing it.
//
// The rules, for every file written through AtomicFile:
//   - Only a regular file or a missing path is replaced. A directory, a FIFO, a device or a
//     socket at the path is refused (an Error), and left as it is.
//   - A symbolic link is followed: the file it points to is replaced, its temporary file lies
//     beside that file, and the link stays. A link to a missing file, to a directory or to a
//     special file is refused.
//   - The bytes go to "<target>.tmp.<pid>", are flushed to disk (fsync), and the temporary is
//     renamed over the target; then the directory is synced. A reader sees the old file or the
//     new one, never a partial file, even if the process dies mid-write.
//   - The new file keeps the replaced file's permission bits and, where the process may set
//     them (root, or its own files), its owner and group; a new file gets 0666 less the umask.
//   - On any failure the temporary is removed and the Error says which step failed and why
//     (the system's reason, strerror). Temporaries of the same target left by processes that no
//     longer exist (a write killed midway) are removed before writing.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tinyformer::nn {

// The checks made on a path before it is read or written: an Error starting with `where` unless
// `path` is missing or a regular file, or a symbolic link to one. For saving, a link must lead to
// an existing file and the directory that receives the file must exist and be writable. Returns
// the path a save writes: `path`, or the file a link points to.
std::string check_file_path(const std::string& path, bool for_saving, const std::string& where);

// One atomic write: construct (checks the path, creates the temporary), write, commit. Without a
// commit (an exception, an early return) the destructor removes the temporary and the file at
// the path stays as it was.
//
//   nn::AtomicFile file(path, "save_report: " + path);
//   file.write(header);
//   file.write(body.data(), body.size());
//   file.commit();
class AtomicFile {
 public:
  // Errors start with `where` (e.g. "CsvLogger: run.csv").
  AtomicFile(const std::string& path, std::string where);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Syncs the temporary, gives it the replaced file's mode (and owner, where allowed), renames
  // it over the target and syncs the directory. Refuses, and removes the temporary, when the path
  // was replaced by something other than a regular file since the constructor checked it.
  void commit();

  // The file being replaced: the path, or the file a symbolic link at the path points to.
  const std::string& target() const { return target_; }

 private:
  std::string where_;
  std::string target_;
  std::string temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

// `contents` written to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view contents,
                           const std::string& where);

// What kind of file a stat's st_mode describes, for messages: "a directory", "a FIFO", "a
// character device", "a block device", "a socket", "a symbolic link" or "not a regular file".
const char* file_kind(unsigned mode);

}  // namespace tinyformer::nn
