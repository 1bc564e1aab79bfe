#include "runtime/rundir/ReadFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

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

InputFile::InputFile(const std::string& path, const ReadFail& fail) : path_(path), fd_(openRegularFile(path, fail)) {
  struct stat info {};
  ::fstat(fd_, &info);
  size_ = static_cast<std::uint64_t>(info.st_size);
}

InputFile::InputFile(InputFile&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    size_ = other.size_;
    other.fd_ = -1;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read(std::uint64_t at, void* out, std::size_t n, const ReadFail& fail) const {
  auto* into = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, into, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) failWith(fail, std::string("cannot read (") + std::strerror(errno) + ")");
    if (got == 0) failWith(fail, "shorter than when it was opened (changed while read?)");
    into += got, at += static_cast<std::uint64_t>(got), n -= static_cast<std::size_t>(got);
  }
}

}  // namespace pstrain::rundir
