#include "models/ModelFile.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/Errors.h"
#include "runtime/rundir/ReadFile.h"
#include "runtime/zip/ZipDirectory.h"

namespace pstrain::models {
namespace {

constexpr std::size_t kChunkBytes = std::size_t(4) << 20;

// Whether `a` and `b` describe the same file with the same contents as far as its metadata
// tells: the same inode, size and modification time (in seconds: the field both Linux and
// macOS name alike). Not the change time: renaming or unlinking the file (a newer export
// renamed over it) changes that, not the contents.
bool sameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size && a.st_mtime == b.st_mtime;
}

// A storage's record as libtorch names it: "<root>/data/<key>" (a number).
bool isStorageRecord(const std::string& name) {
  const std::size_t slash = name.rfind('/');
  if (slash == std::string::npos || slash + 1 == name.size()) return false;
  const std::string key = name.substr(slash + 1);
  if (!std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  const std::string folder = name.substr(0, slash);
  return folder == "data" || (folder.size() > 5 && folder.compare(folder.size() - 5, 5, "/data") == 0);
}

}  // namespace

ModelFile::ModelFile(const std::string& path) : path_(path), owned_(true) {
  fd_ = rundir::openRegularFile(path, [&](const std::string& what) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      throw ConfigError(fmt::format("--model {}: no such file (a TorchScript file, from "
                                    "torch.jit.script(model).save(FILE); the zoo's names: --list-models)", path));
    }
    throw ConfigError(fmt::format("--model {}: {} (a TorchScript file, from torch.jit.script(model).save(FILE))",
                                  path, what));
  });
  try {
    load();
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

ModelFile::ModelFile(int fd, const std::string& path) : path_(path), fd_(fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    throw ConfigError(fmt::format("{}: the check process's standard input is not the regular file to check", path));
  }
  load();
}

ModelFile::~ModelFile() {
  if (owned_) ::close(fd_);
}

void ModelFile::load() {
  ::fstat(fd_, &opened_);
  size_ = static_cast<std::size_t>(opened_.st_size);
  image_ = std::make_unique<portable::FreshPages>(size_);
  try {
    findLargeStorages();
  } catch (const std::exception&) {
    leftOut_.clear();  // an unreadable directory: the whole file, for the check to refuse
  }
  readImage();
}

// Once through the whole file: its checksum, and the image of all but the left-out data.
void ModelFile::readImage() {
  std::vector<char> chunk(std::min(kChunkBytes, std::max<std::size_t>(size_, 1)));
  std::uint32_t crc = 0;
  auto gap = leftOut_.begin();
  for (std::uint64_t at = 0; at < size_;) {
    const std::size_t n = std::min<std::uint64_t>(chunk.size(), size_ - at);
    read(at, chunk.data(), n);
    crc = zip::crc32Of(crc, chunk.data(), n);
    const std::uint64_t end = at + n;
    for (std::uint64_t copied = at; copied < end;) {
      while (gap != leftOut_.end() && gap->second <= copied) ++gap;
      if (gap != leftOut_.end() && gap->first <= copied) {  // within left-out data: skipped
        copied = std::min<std::uint64_t>(end, gap->second);
        continue;
      }
      const std::uint64_t until = gap == leftOut_.end() ? end : std::min<std::uint64_t>(end, gap->first);
      std::memcpy(image_->data() + copied, chunk.data() + (copied - at), until - copied);
      copied = until;
    }
    at += n;
  }
  identity_ = fmt::format("crc32 {:08x}, {} bytes", crc, size_);
}

// The data of every large stored storage record, from the zip directory read off the file.
void ModelFile::findLargeStorages() {
  const zip::ReadAt readAt = [&](std::uint64_t at, void* into, std::size_t n) { read(at, into, n); };
  const zip::Fail fail = [](const std::string& what) { throw Error(what); };
  for (const zip::Entry& entry : zip::readDirectory(size_, readAt, fail)) {
    if (entry.method != 0 || entry.encrypted || entry.size < kLargeStorageBytes || !isStorageRecord(entry.name)) continue;
    const std::uint64_t begin = zip::dataOffset(entry, size_, readAt, fail);
    leftOut_.emplace_back(begin, begin + entry.size);
  }
  std::sort(leftOut_.begin(), leftOut_.end());
  for (std::size_t i = 1; i < leftOut_.size(); ++i) {
    if (leftOut_[i].first < leftOut_[i - 1].second) throw Error("records overlap");
  }
}

bool ModelFile::leftOut(std::uint64_t at, std::size_t n) const {
  const auto it = std::lower_bound(leftOut_.begin(), leftOut_.end(), std::make_pair(at, std::uint64_t(0)));
  return it != leftOut_.end() && it->first == at && it->second == at + n;
}

void ModelFile::copy(std::uint64_t at, void* into, std::size_t n) const {
  std::memcpy(into, image_->data() + at, n);
  for (const auto& [begin, end] : leftOut_) {
    const std::uint64_t from = std::max(begin, at), until = std::min<std::uint64_t>(end, at + n);
    if (from < until) read(from, static_cast<char*>(into) + (from - at), until - from);
  }
}

void ModelFile::read(std::uint64_t at, void* into, std::size_t n) const {
  auto* out = static_cast<char*>(into);
  for (std::size_t got = 0; got < n;) {
    const ssize_t r = ::pread(fd_, out + got, n - got, static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw ConfigError(fmt::format("{}: cannot read ({})", path_, std::strerror(errno)));
    if (r == 0) {
      throw ConfigError(fmt::format("{}: the file shrank while it was being read (another program is writing it); "
                                    "start again once it is written", path_));
    }
    got += static_cast<std::size_t>(r);
  }
}

void ModelFile::checkUnchanged() const {
  struct stat now {};
  if (::fstat(fd_, &now) != 0 || !sameFile(now, opened_)) {
    throw ConfigError(fmt::format("{}: the file changed while it was being loaded (another program is writing it); "
                                  "start again once it is written", path_));
  }
}

}  // namespace pstrain::models
