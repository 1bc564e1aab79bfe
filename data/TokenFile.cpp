#include "data/TokenFile.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "data/ReadAt.h"
#include "runtime/Errors.h"

namespace pstrain::data {
namespace {

constexpr std::int32_t kLlmcMagic = 20240520;
constexpr std::int32_t kLlmcVersion = 1;  // uint16 ids (GPT-2's vocabulary and smaller)
constexpr std::size_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);

std::int32_t int32At(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return static_cast<std::int32_t>(v);
}

std::string baseName(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool nanoGptName(const std::string& path) {
  const std::string name = baseName(path);
  return name == "train.bin" || name == "val.bin";
}

}  // namespace

TokenLayout tokenLayout(const unsigned char* head, std::size_t headBytes, std::uint64_t fileSize,
                        const std::string& path) {
  const bool llmcMagic = headBytes >= 12 && int32At(head) == kLlmcMagic;
  if (llmcMagic && fileSize >= kLlmcHeaderBytes) {
    const std::int32_t version = int32At(head + 4), count = int32At(head + 8);
    if (version != kLlmcVersion) {
      throw DataError(fmt::format("{}: an llm.c token file of version {}; pstrain reads version {} (uint16 ids)", path,
                                  version, kLlmcVersion));
    }
    const std::uint64_t expected = kLlmcHeaderBytes + 2 * static_cast<std::uint64_t>(std::max(count, 0));
    if (count < 0 || fileSize != expected) {
      throw DataError(fmt::format("{}: its llm.c header says {} tokens ({} bytes with the header), the file has {} "
                                  "bytes (truncated or not a token file)", path, count, expected, fileSize));
    }
    return {kLlmcHeaderBytes, static_cast<std::uint64_t>(count)};
  }
  if (nanoGptName(path)) {
    if (fileSize % 2 != 0) {
      throw DataError(fmt::format("{}: {} bytes, an odd size: not a file of uint16 token ids (truncated?)", path,
                                  fileSize));
    }
    return {0, fileSize / 2};
  }
  throw DataError(fmt::format("{}: not an llm.c token file (its first int32 is {}, llm.c's magic is {}); nanoGPT's "
                              "flat files of uint16 ids are named train.bin and val.bin", path,
                              headBytes >= 4 ? int32At(head) : 0, kLlmcMagic));
}

std::string validationPath(const std::string& trainPath) {
  const auto slash = trainPath.find_last_of('/');
  const std::size_t nameAt = slash == std::string::npos ? 0 : slash + 1;
  const auto train = trainPath.rfind("train");
  if (train == std::string::npos || train < nameAt) {
    throw DataError(fmt::format("{}: cannot tell its test split: name the file train.bin (val.bin beside it) or "
                                "NAME_train.bin (NAME_val.bin beside it)", trainPath));
  }
  return trainPath.substr(0, train) + "val" + trainPath.substr(train + 5);
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    throw DataError(fmt::format("{}: cannot open ({}); --dataset takes a token file (nanoGPT's train.bin, an llm.c "
                                ".bin), an .npz, or a name of --list-datasets", path, std::strerror(errno)));
  }
  try {
    struct stat info {};
    ::fstat(fd_, &info);
    fileSize_ = static_cast<std::uint64_t>(info.st_size);
    unsigned char head[kLlmcHeaderBytes] = {};
    const std::size_t headBytes = static_cast<std::size_t>(std::min<std::uint64_t>(fileSize_, sizeof head));
    if (headBytes > 0) readAt(fd_, 0, head, headBytes, path);
    layout_ = tokenLayout(head, headBytes, fileSize_, path);
    if (fileSize_ > 0) {
      void* base = ::mmap(nullptr, fileSize_, PROT_READ, MAP_SHARED, fd_, 0);
      if (base == MAP_FAILED) throw DataError(fmt::format("{}: cannot map it ({})", path, std::strerror(errno)));
      base_ = static_cast<const unsigned char*>(base);
    }
    // The largest id, and the identity: a pass of read(2)s (the page cache, not this
    // process's memory) with the CRC-32 of the first and the last MiB of ids.
    std::vector<std::uint16_t> chunk(1 << 19);
    uLong crc = crc32(0, nullptr, 0);
    const std::uint64_t ids = layout_.count, chunkIds = chunk.size();
    for (std::uint64_t at = 0; at < ids; at += chunkIds) {
      const std::size_t n = static_cast<std::size_t>(std::min(chunkIds, ids - at));
      readAt(fd_, layout_.offset + 2 * at, chunk.data(), 2 * n, path);
      maxId_ = std::max(maxId_, *std::max_element(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n)));
      if (at == 0 || at + n == ids) crc = crc32(crc, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(2 * n));
    }
    identity_ = fmt::format("{} tokens, crc32 of the first and last MiB {:08x}", ids, crc);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

TokenFile::~TokenFile() {
  if (base_) ::munmap(const_cast<unsigned char*>(base_), fileSize_);
  ::close(fd_);
}

void TokenFile::copy(std::uint64_t offset, std::uint64_t n, std::int64_t* out) const {
  if (offset > layout_.count || n > layout_.count - offset) {
    throw DataError(fmt::format("{}: ids {}..{} are past its {} tokens", path_, offset, offset + n, layout_.count));
  }
  const unsigned char* first = base_ + layout_.offset + 2 * offset;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint16_t id;
    std::memcpy(&id, first + 2 * i, sizeof id);  // the ids need not be aligned (llm.c's header is, nanoGPT's too)
    out[i] = id;
  }
  // The pages stay in the page cache; this process's resident memory does not keep them.
  static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto from = reinterpret_cast<std::uintptr_t>(first) & ~(page - 1);
  const auto to = reinterpret_cast<std::uintptr_t>(first + 2 * n);
  ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

}  // namespace pstrain::data
