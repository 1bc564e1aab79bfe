#pragma once
// Reading a whole input file once, by one descriptor: what is checked is then what is used
// (a file renamed into the path between two opens is never read). Torch-free.
#include <cstdint>
#include <functional>
#include <string>

namespace pstrain::rundir {

// Calls the caller's error with what is wrong; must throw.
using ReadFail = std::function<void(const std::string& what)>;

// The whole of the regular file `path`, at most the size it had when opened. Opened without
// blocking, so that a FIFO or a device in a file's place is refused, never waited on.
// `fail` gets "cannot open (...)", "not a regular file" or "cannot read (...)".
std::string readRegularFile(const std::string& path, const ReadFail& fail);

// The regular file `path` opened for reading (O_CLOEXEC), checked on that descriptor: a
// FIFO, a device or a directory is refused through `fail`, without blocking. The caller
// closes the descriptor.
int openRegularFile(const std::string& path, const ReadFail& fail);

// A regular file open for reading at any offset, never read whole (pread): a file of
// weights whose tensors each rank reads into its own memory. Move-only; closes its
// descriptor.
class InputFile {
 public:
  // Opens `path` as openRegularFile does.
  InputFile(const std::string& path, const ReadFail& fail);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }  // as it was when opened
  // Exactly `n` bytes at `at` into `out`; `fail` (the constructor's kind) names the file
  // when they are not there (it shrank, or a read failed).
  void read(std::uint64_t at, void* out, std::size_t n, const ReadFail& fail) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace pstrain::rundir
