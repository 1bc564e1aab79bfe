#include "runtime/rundir/ReadFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace pstrain::rundir {
namespace {

[[noreturn]] void failWith(const ReadFail& fail, const std::string& what) {
  fail(what);
  throw std::logic_error("rundir::ReadFail returned");  // it must throw
}

}  // namespace

int openRegularFile(const std::string& path, const ReadFail& fail) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) failWith(fail, std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    failWith(fail, "not a regular file");
  }
  // Reads block as usual from here on (a regular file never waits anyway).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string readRegularFile(const std::string& path, const ReadFail& fail) {
  const int fd = openRegularFile(path, fail);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  ::fstat(fd, &info);
  std::string bytes(static_cast<std::size_t>(info.st_size), '\0');
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) failWith(fail, std::string("cannot read (") + std::strerror(errno) + ")");
    if (n == 0) break;  // shrank since it was opened
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

}  // namespace pstrain::rundir
