#include "models/ModelFile.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/Errors.h"
#include "runtime/Parts.h"
#include "runtime/Text.h"
#include "runtime/rundir/ReadFile.h"
#include "runtime/zip/ZipDirectory.h"

namespace pstrain::models {
namespace {

constexpr std::size_t kChunkBytes = kPartBytes;
// The most that a zip reader reads at the file's end in search of the end record (its
// comment may be 64 KiB long).
constexpr std::size_t kEndSearchBytes = zip::kEndBytes + 65535;
constexpr const char kDebugSuffix[] = ".debug_pkl";

// Whether `name` (lower case) is a storage's record as libtorch names it: "<root>/data/<key>",
// the key a number.
bool isStorageRecord(const std::string& name, const std::string& root) {
  const std::string folder = root + "/data/";
  if (name.size() <= folder.size() || name.compare(0, folder.size(), folder) != 0) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(folder.size()), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// A zip directory this reader cannot read: the image is then the whole file, and the
// archive check says what is wrong.
struct UnreadableDirectory {};

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
  struct stat info {};
  ::fstat(fd_, &info);
  size_ = static_cast<std::size_t>(info.st_size);
  image_ = std::make_unique<portable::FreshPages>(size_);
  try {
    planImage();
  } catch (const UnreadableDirectory&) {
    storages_.clear();
    debugNames_.clear();
  }
  readImage();
  hideDebugRecords();
}

// The large storages, each checked to overlap nothing else of the archive, and the debug
// records' names, from the zip directory read off the file.
void ModelFile::planImage() {
  const zip::ReadAt readAt = [&](std::uint64_t at, void* into, std::size_t n) { read(at, into, n); };
  const zip::Fail fail = [](const std::string&) { throw UnreadableDirectory(); };
  const std::vector<zip::Entry> entries = zip::readDirectory(size_, readAt, fail);
  if (entries.empty()) return;
  const std::string root = lowerCase(entries.front().name.substr(0, entries.front().name.find('/')));
  std::vector<zip::Span> others = zip::directorySpans(size_, readAt, fail);  // all but the storages' data
  for (const zip::Entry& entry : entries) {
    const std::uint64_t data = zip::dataOffset(entry, size_, readAt, fail);
    const std::string name = lowerCase(entry.name);
    const bool large = entry.method == 0 && !entry.encrypted && entry.size == entry.compressedSize &&
                       entry.size >= kLargeStorageBytes && isStorageRecord(name, root);
    if (large) {
      storages_.push_back({data, data + entry.size, name});
    } else {
      others.push_back({data, data + entry.compressedSize + (entry.descriptor ? zip::kMaxDescriptorBytes : 0)});
    }
    others.push_back({entry.localOffset, data});
    if (endsWith(name, kDebugSuffix)) debugNames_.push_back(entry.centralOffset + zip::kCentralBytes + entry.name.size());
  }
  std::sort(storages_.begin(), storages_.end(), [](const Storage& a, const Storage& b) { return a.begin < b.begin; });
  const auto refuse = [&](const Storage& storage, const std::string& what) {
    throw ConfigError(fmt::format("{}: not a TorchScript file pstrain reads: the data of record {} overlap {} (a "
                                  "damaged or crafted file); save the model with torch.jit.script(model).save(\"{}\")",
                                  path_, printable(storage.name), what, path_));
  };
  for (std::size_t i = 0; i < storages_.size(); ++i) {
    const zip::Span span{storages_[i].begin, storages_[i].end};
    if (i > 0 && span.begin < storages_[i - 1].end) refuse(storages_[i], "those of record " + printable(storages_[i - 1].name));
    for (const zip::Span& other : others) {
      if (span.overlaps(other)) refuse(storages_[i], fmt::format("bytes {} to {} of another record or the zip "
                                                                 "directory", other.begin, other.end));
    }
  }
}

// Once through the whole file: its checksum and each storage's, and the image of all but
// the storages' data.
void ModelFile::readImage() {
  std::vector<char> chunk(std::min(kChunkBytes, std::max<std::size_t>(size_, 1)));
  std::uint32_t crc = 0;
  auto gap = storages_.begin();
  for (std::uint64_t at = 0; at < size_;) {
    const std::size_t n = std::min<std::uint64_t>(chunk.size(), size_ - at);
    read(at, chunk.data(), n);
    crc = zip::crc32Of(crc, chunk.data(), n);
    const std::uint64_t end = at + n;
    for (std::uint64_t copied = at; copied < end;) {
      while (gap != storages_.end() && gap->end <= copied) ++gap;
      if (gap != storages_.end() && gap->begin <= copied) {  // within a storage's data: its checksum only
        const std::uint64_t until = std::min<std::uint64_t>(end, gap->end);
        gap->crc = zip::crc32Of(gap->crc, chunk.data() + (copied - at), until - copied);
        copied = until;
        continue;
      }
      const std::uint64_t until = gap == storages_.end() ? end : std::min<std::uint64_t>(end, gap->begin);
      std::memcpy(image_->data() + copied, chunk.data() + (copied - at), until - copied);
      copied = until;
    }
    at += n;
  }
  identity_ = fmt::format("crc32 {:08x}, {} bytes", crc, size_);
}

void ModelFile::hideDebugRecords() {
  for (const std::uint64_t nameEnd : debugNames_) image_->data()[nameEnd - 1] = '_';
}

bool ModelFile::isStorageData(std::uint64_t at, std::size_t n) const {
  const auto it = std::lower_bound(storages_.begin(), storages_.end(), at,
                                   [](const Storage& s, std::uint64_t begin) { return s.begin < begin; });
  return it != storages_.end() && it->begin == at && it->end == at + n;
}

void ModelFile::copyImage(std::uint64_t at, void* into, std::size_t n) const {
  const bool atTheEnd = at + n == size_ && n <= kEndSearchBytes;
  for (const Storage& storage : storages_) {
    if (!atTheEnd && storage.begin < at + n && at < storage.end) {
      throw ConfigError(fmt::format("{}: libtorch read bytes {} to {} of the file, part of the data of record {}, "
                                    "which pstrain reads only whole into its tensor: this libtorch reads model files otherwise than "
                                    "pstrain expects", path_, at, at + n, printable(storage.name)));
    }
  }
  std::memcpy(into, image_->data() + at, n);
}

void ModelFile::fill(std::uint64_t at, void* into, std::size_t n) const {
  const auto it = std::find_if(storages_.begin(), storages_.end(),
                               [&](const Storage& s) { return s.begin == at && s.end == at + n; });
  if (it == storages_.end()) throw InternalError(fmt::format("{}: bytes {} to {} are no storage's data", path_, at, at + n));
  read(at, into, n);
  if (zip::crc32Of(0, into, n) != it->crc) {
    throw ConfigError(fmt::format("{}: the file changed while it was being loaded (record {} is not what it was when "
                                  "the file was checked: another program is writing it); start again once it is "
                                  "written", path_, it->name));
  }
}

void ModelFile::confirmStorages(const std::set<std::string>& named) const {
  for (const Storage& storage : storages_) {
    if (named.count(storage.name)) continue;
    throw ConfigError(fmt::format("{}: not a TorchScript file pstrain reads: record {} looks like a storage's, but "
                                  "data.pkl names no such storage (a damaged or crafted file); save the model with "
                                  "torch.jit.script(model).save(\"{}\")", path_, printable(storage.name), path_));
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

}  // namespace pstrain::models
