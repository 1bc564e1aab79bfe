#pragma once
// Positioned reads of the dataset readers (token files, .npz members).
#include <fmt/format.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/Errors.h"

namespace pstrain::data {

// Reads exactly `n` bytes at `offset` of `fd`, or throws DataError naming `what` (the file,
// or a member of it), the range and why: the file ends before it (truncated) or the OS's error.
inline void readAt(int fd, std::uint64_t offset, void* out, std::size_t n, const std::string& what) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw DataError(fmt::format("{}: truncated (could not read {} bytes at offset {}: {})", what, n, offset,
                                  got < 0 ? std::strerror(errno) : "the file ends before"));
    }
    p += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

// The size of the open file `fd` named `path`; throws DataError when it is a directory (whose
// reads fail as if it were empty) or cannot be looked at.
inline std::uint64_t sizeOfDataFile(int fd, const std::string& path) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw DataError(fmt::format("{}: cannot look at it ({})", path, std::strerror(errno)));
  if (S_ISDIR(info.st_mode)) {
    throw DataError(fmt::format("{}: a directory; --dataset takes a file (an .npz, a token file such as "
                                "DIR/train.bin) or a name of --list-datasets", path));
  }
  if (!S_ISREG(info.st_mode)) {
    throw DataError(fmt::format("{}: not a regular file (a FIFO, a device or a socket, whose reads would wait or "
                                "never end); --dataset takes a file", path));
  }
  return static_cast<std::uint64_t>(info.st_size);
}

// `path` opened for reading without waiting (a FIFO's open would wait for a writer) and
// checked to be a regular file (sizeOfDataFile); -1 with errno when it cannot be opened.
inline int openDataFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fd;
  try {
    sizeOfDataFile(fd, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace pstrain::data
