#include "runtime/metrics/RecordFile.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/Errors.h"

namespace pstrain::metrics {

RecordFile::RecordFile(std::string path)
    : path_(std::move(path)), fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644)) {
  if (fd_ < 0 && errno == ELOOP) {  // a refusal, not a failure: pstrain-run must not try again
    throw ConfigError(fmt::format("{}: a symbolic link; run files are never written through one: remove it", path_));
  }
  if (fd_ < 0) throw Error(fmt::format("{}: cannot open for writing ({})", path_, std::strerror(errno)));
}

RecordFile::~RecordFile() { ::close(fd_); }

void RecordFile::append(const std::string& record) {
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  std::size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      if (done > 0 && before >= 0) (void)::ftruncate(fd_, before);  // no torn record
      throw Error(fmt::format("{}: write failed ({})", path_, std::strerror(error)));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace pstrain::metrics
