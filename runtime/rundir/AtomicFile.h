#pragma once
// Files that readers see whole or not at all: written under a temporary name, made durable
// and renamed into place. Torch-free; checkpoints, run.json and markers are written so.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

namespace pstrain::rundir {

// A file written under a temporary name (PATH.tmpPID), made durable and renamed to PATH by
// commit(): readers see the old file or the whole new one, never a part. Counts the bytes
// and their CRC-32 on the way (for a checkpoint's .ok marker). Not committed, the temporary
// is removed. Throws CheckpointError naming the file on any failure.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* data, std::size_t bytes);
  // Makes the file durable, runs `beforeRename` (if any: the file is then whole on disk,
  // PATH still the old one), and renames it to PATH.
  void commit(const std::function<void()>& beforeRename = nullptr);
  std::size_t size() const { return size_; }
  std::uint32_t crc32() const { return crc_; }

 private:
  std::string target_, temp_;
  int fd_ = -1;
  bool committed_ = false;
  std::size_t size_ = 0;
  std::uint32_t crc_ = 0;
};

// Writes `bytes` to `path` as an AtomicFile.
void atomicWrite(const std::string& path, const std::string& bytes);
// Writes what `write` puts on its stream to `path` as an AtomicFile, as it goes (a writer
// that takes a std::ostream, such as TorchScript's save, needs no copy of the file in
// memory), unless it returns false: nothing is written then. Returns what it returned.
// Throws the file's CheckpointError on a failed write.
bool atomicWriteStream(const std::string& path, const std::function<bool(std::ostream&)>& write);

// A directory of a run (the train dir, ckpt/): the missing ones on its path are created
// 0700 (never left to the umask), then the last is opened with O_NOFOLLOW and checked on
// that descriptor, not by its path again: a directory (not a symbolic link to one), this
// user's, that nobody else can write. Returns the open descriptor (the caller closes it).
// Throws ConfigError naming the path and what to do.
int openPrivateDirectory(const std::string& path);

// Makes the directory entries of `dir` durable (after a rename or unlink in it).
void syncDirectory(const std::string& dir);

// Removes `path` and, if it is a directory, everything below it (symbolic links are removed,
// not followed); nothing if it does not exist. Throws CheckpointError naming what could not
// be removed. Not std::filesystem::remove_all: PyTorch's Linux builds export their own copy
// of it from libtorch.so, which the program may call instead, and with PyTorch 2.11 that
// copy crashes (a call through a null pointer).
void removeTree(const std::string& path);

}  // namespace pstrain::rundir
