#include "runtime/rundir/AtomicFile.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <ostream>
#include <streambuf>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/zip/ZipDirectory.h"

namespace pstrain::rundir {

void syncDirectory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

AtomicFile::AtomicFile(std::string path) : target_(std::move(path)) {
  temp_ = fmt::format("{}.tmp{}", target_, ::getpid());
  // A new file, never one that exists (a link planted there would redirect the write); a
  // leftover of a killed process with the same pid is removed (unlink removes a link,
  // never what it points to) and the create tried once more.
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  fd_ = ::open(temp_.c_str(), flags, 0644);
  if (fd_ < 0 && errno == EEXIST && ::unlink(temp_.c_str()) == 0) fd_ = ::open(temp_.c_str(), flags, 0644);
  if (fd_ < 0) {
    throw CheckpointError(fmt::format("{}: cannot create ({}); is the directory writable?", temp_,
                                      std::strerror(errno)));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  crc_ = zip::crc32Of(crc_, p, bytes);
  size_ += bytes;
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw CheckpointError(fmt::format("{}: write failed ({})", temp_, std::strerror(errno)));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit(const std::function<void()>& beforeRename) {
  const bool synced = portable::syncToDisk(fd_);
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  if (synced && closed && beforeRename) beforeRename();
  if (!synced || !closed || ::rename(temp_.c_str(), target_.c_str()) != 0) {
    throw CheckpointError(fmt::format("{}: could not be saved ({})", target_, std::strerror(errno)));
  }
  committed_ = true;
  const auto slash = target_.find_last_of('/');
  syncDirectory(slash == std::string::npos ? "." : target_.substr(0, std::max<std::size_t>(slash, 1)));
}

int openPrivateDirectory(const std::string& path) {
  std::filesystem::path made;
  for (const auto& part : std::filesystem::path(path)) {
    made /= part;
    if (::mkdir(made.c_str(), 0700) != 0 && errno != EEXIST) {
      throw ConfigError(fmt::format("{}: not writable: cannot create {} ({}); choose another --train-dir", path,
                                    made.string(), std::strerror(errno)));
    }
  }
  // Whoever can write the parent can put another directory in this one's place between the
  // checks below and the writes that follow them; a sticky parent (/tmp) lets only the
  // owner rename or remove it.
  const std::filesystem::path parent = std::filesystem::absolute(path).lexically_normal().parent_path();
  struct stat above;
  if (::stat(parent.c_str(), &above) == 0 && (above.st_mode & (S_IWGRP | S_IWOTH)) && !(above.st_mode & S_ISVTX)) {
    throw ConfigError(fmt::format("{}: its parent {} can be written by other users (mode {:04o}), who could replace "
                                  "it; make the parent yours alone (chmod go-w) or sticky (chmod +t), or choose "
                                  "another --train-dir", path, parent.string(), above.st_mode & 07777));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    struct stat link;
    if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      throw ConfigError(fmt::format("{}: a symbolic link; give the directory it points to", path));
    }
    throw ConfigError(fmt::format("{}: not a directory, or cannot be opened ({})", path, std::strerror(error)));
  }
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    throw ConfigError(fmt::format("{}: cannot be read ({})", path, std::strerror(error)));
  }
  // Checkpoints are unpickled by torch.load and by pstrain --resume: nobody else may write them.
  if (info.st_uid != ::geteuid() || (info.st_mode & (S_IWGRP | S_IWOTH))) {
    ::close(fd);
    throw ConfigError(fmt::format("{}: other users can write it (owner uid {}, mode {:04o}); a run's checkpoints "
                                  "must be yours alone: chmod go-w it, or choose another --train-dir",
                                  path, info.st_uid, info.st_mode & 07777));
  }
  return fd;
}

void atomicWrite(const std::string& path, const std::string& bytes) {
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

namespace {

// A stream buffer that hands what it is given to an AtomicFile, in blocks of 1 MiB, and keeps
// the first failure to be thrown once the writer is done (a stream swallows exceptions).
class AtomicFileBuffer : public std::streambuf {
 public:
  explicit AtomicFileBuffer(AtomicFile& file) : file_(file), block_(1 << 20) {
    setp(block_.data(), block_.data() + block_.size());
  }

  // Writes what is buffered; rethrows the first failure.
  void finish() {
    sync();
    if (failure_) std::rethrow_exception(failure_);
  }

 protected:
  int overflow(int c) override {
    if (sync() != 0) return traits_type::eof();
    if (c != traits_type::eof()) {
      *pptr() = static_cast<char>(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override {
    if (failure_) return -1;
    try {
      file_.write(pbase(), static_cast<std::size_t>(pptr() - pbase()));
    } catch (...) {
      failure_ = std::current_exception();
      return -1;
    }
    setp(block_.data(), block_.data() + block_.size());
    return 0;
  }

 private:
  AtomicFile& file_;
  std::vector<char> block_;
  std::exception_ptr failure_;
};

}  // namespace

bool atomicWriteStream(const std::string& path, const std::function<bool(std::ostream&)>& write) {
  AtomicFile file(path);
  AtomicFileBuffer buffer(file);
  std::ostream out(&buffer);
  if (!write(out)) return false;
  out.flush();
  buffer.finish();
  file.commit();
  return true;
}

void removeTree(const std::string& path) {
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0 && errno == ENOENT) return;
  // Children before their directory (FTW_DEPTH), links as links (FTW_PHYS).
  const int rc = ::nftw(path.c_str(), [](const char* entry, const struct stat*, int, struct FTW*) {
    return ::remove(entry) == 0 || errno == ENOENT ? 0 : -1;
  }, 16, FTW_DEPTH | FTW_PHYS);
  if (rc != 0) throw CheckpointError(fmt::format("{}: cannot remove ({})", path, std::strerror(errno)));
}

}  // namespace pstrain::rundir
