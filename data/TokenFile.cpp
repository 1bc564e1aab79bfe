#include "data/TokenFile.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "data/Npz.h"
#include "data/ReadAt.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"

namespace pstrain::data {
namespace {

// llm.c's token files: a header of 256 int32 (magic, version, token count), then the ids.
struct LlmcFormat {
  std::int32_t magic, version;
  std::uint64_t idBytes;
  const char* ids;
};
constexpr LlmcFormat kLlmcFormats[] = {
    {20240520, 1, 2, "uint16"},  // GPT-2's vocabulary and smaller
    {20240801, 7, 4, "uint32"},  // larger vocabularies (LLaMA-3's)
};
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

// Whether a first int32 reads as a date, the way llm.c's magics are made (20240520): a
// header of a format pstrain does not know, never nanoGPT's ids.
bool looksLikeAMagic(std::int32_t first) { return first >= 20000101 && first <= 20991231; }

// The largest of the `n` little-endian ids of type Id at `bytes`.
template <typename Id>
std::uint32_t largest(const unsigned char* bytes, std::size_t n) {
  Id most = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Id id;
    std::memcpy(&id, bytes + i * sizeof(Id), sizeof id);
    most = std::max(most, id);
  }
  return most;
}

std::string llmcFormats() {
  std::string text;
  for (const auto& f : kLlmcFormats) {
    text += fmt::format("{}magic {} version {} ({} ids)", text.empty() ? "" : ", ", f.magic, f.version, f.ids);
  }
  return text;
}

}  // namespace

namespace {

// nanoGPT's and llm.c's .bin files (TokenFile.h).
TokenLayout binTokenLayout(const unsigned char* head, std::size_t headBytes, std::uint64_t fileSize,
                           const std::string& path) {
  const std::int32_t first = headBytes >= 4 ? int32At(head) : 0;
  for (const auto& format : kLlmcFormats) {
    if (first != format.magic) continue;
    const std::int32_t version = headBytes >= 8 ? int32At(head + 4) : -1;
    if (version != format.version || headBytes < 12 || fileSize < kLlmcHeaderBytes) {
      throw DataError(fmt::format("{}: an llm.c token file (magic {}) of version {}{}; pstrain reads {}", path,
                                  first, version, fileSize < kLlmcHeaderBytes ? " shorter than its header" : "",
                                  llmcFormats()));
    }
    const std::int32_t count = int32At(head + 8);
    const std::uint64_t expected = kLlmcHeaderBytes + format.idBytes * static_cast<std::uint64_t>(std::max(count, 0));
    if (count < 0 || fileSize != expected) {
      throw DataError(fmt::format("{}: its llm.c header says {} tokens ({} ids: {} bytes with the header), the file "
                                  "has {} bytes (truncated or not a token file)", path, count, format.ids, expected,
                                  fileSize));
    }
    return {kLlmcHeaderBytes, static_cast<std::uint64_t>(count), format.idBytes};
  }
  if (nanoGptName(path)) {
    if (looksLikeAMagic(first)) {
      throw DataError(fmt::format("{}: its first int32 is {}, a header's magic, not token ids: pstrain reads llm.c's "
                                  "{}, and nanoGPT's flat uint16 files (train.bin, val.bin) have no header; write the "
                                  "tokens again with tools/text_to_bin.py", path, first, llmcFormats()));
    }
    if (fileSize % 2 != 0) {
      throw DataError(fmt::format("{}: {} bytes, an odd size: not a file of uint16 token ids (truncated?)", path,
                                  fileSize));
    }
    return {0, fileSize / 2, 2};
  }
  throw DataError(fmt::format("{}: not an llm.c token file (its first int32 is {}; llm.c's are {}){}", path, first,
                              llmcFormats(),
                              looksLikeAMagic(first) ? ""
                                                     : "; nanoGPT's flat files of uint16 ids are named train.bin and "
                                                       "val.bin"));
}

// NumPy's .npy of one dimension of uint16 or uint32 ids (np.save(f, ids.astype(np.uint16))).
TokenLayout npyTokenLayout(const unsigned char* head, std::size_t headBytes, std::uint64_t fileSize,
                           const std::string& path) {
  static const std::map<std::string, std::size_t> kIds = {{"u2", 2}, {"u4", 4}};
  std::uint64_t offset = 0;
  const NpyArray a = npyFileHeader(head, headBytes, kIds, offset, path);
  if (a.shape.size() != 1) {
    throw DataError(fmt::format("{}: a .npy of token ids has one dimension (np.save(f, ids.astype(np.uint16))); this "
                                "one has {}", path, a.shape.size()));
  }
  const std::uint64_t count = a.elements(), bytes = offset <= fileSize ? fileSize - offset : 0;
  if (offset > fileSize || count > bytes / a.itemSize || count * a.itemSize != bytes) {
    throw DataError(fmt::format("{}: holds {} bytes of ids, its shape needs {} x {} (truncated?)", path, bytes, count,
                                a.itemSize));
  }
  return {offset, count, a.itemSize};
}

// One row per token-file format: the extension that names it, and how its ids lie. A name
// without one of them is read as a .bin (llm.c's files may have any name).
struct TokenFormat {
  const char* extension;
  TokenLayout (*layout)(const unsigned char*, std::size_t, std::uint64_t, const std::string&);
};
constexpr TokenFormat kTokenFormats[] = {{".npy", npyTokenLayout}, {".bin", binTokenLayout}};

}  // namespace

TokenLayout tokenLayout(const unsigned char* head, std::size_t headBytes, std::uint64_t fileSize,
                        const std::string& path) {
  // NumPy's magic says what the file is, whatever its name (a .npy renamed train.bin would
  // otherwise be read as ids, its header among them).
  if (headBytes >= 6 && std::memcmp(head, "\x93NUMPY", 6) == 0) return npyTokenLayout(head, headBytes, fileSize, path);
  for (const TokenFormat& format : kTokenFormats) {
    if (endsWith(path, format.extension)) {
      return format.layout(head, headBytes, fileSize, path);
    }
  }
  return binTokenLayout(head, headBytes, fileSize, path);
}

std::string validationPath(const std::string& trainPath) {
  const auto slash = trainPath.find_last_of('/');
  const std::size_t nameAt = slash == std::string::npos ? 0 : slash + 1;
  const auto train = trainPath.rfind("train");
  if (train == std::string::npos || train < nameAt) {
    const auto dot = trainPath.find_last_of('.');
    const std::string extension = dot == std::string::npos || dot < nameAt ? "" : trainPath.substr(dot);
    throw DataError(fmt::format("{}: cannot tell its test split: name the file train{} (val{} beside it) or "
                                "NAME_train{} (NAME_val{} beside it)", trainPath, extension, extension, extension,
                                extension));
  }
  return trainPath.substr(0, train) + "val" + trainPath.substr(train + 5);
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  fd_ = openDataFile(path);
  if (fd_ < 0) {
    throw DataError(fmt::format("{}: cannot open ({}); --dataset takes a token file (nanoGPT's train.bin, an llm.c "
                                ".bin, NumPy's .npy of ids), an .npz, or a name of --list-datasets", path, std::strerror(errno)));
  }
  try {
    fileSize_ = sizeOfDataFile(fd_, path);
    unsigned char head[kLlmcHeaderBytes] = {};
    const std::size_t headBytes = static_cast<std::size_t>(std::min<std::uint64_t>(fileSize_, sizeof head));
    if (headBytes > 0) readAt(fd_, 0, head, headBytes, path);
    layout_ = tokenLayout(head, headBytes, fileSize_, path);
    // The largest id, and the identity: a pass of read(2)s (the page cache, not this
    // process's memory) with the CRC-32 of the first and the last MiB of ids.
    std::vector<unsigned char> chunk(1 << 20);
    uLong crc = crc32(0, nullptr, 0);
    const std::uint64_t ids = layout_.count, chunkIds = chunk.size() / layout_.idBytes;
    for (std::uint64_t at = 0; at < ids; at += chunkIds) {
      const std::size_t n = static_cast<std::size_t>(std::min(chunkIds, ids - at));
      readAt(fd_, layout_.offset + layout_.idBytes * at, chunk.data(), layout_.idBytes * n, path);
      maxId_ = std::max(maxId_, layout_.idBytes == 2 ? largest<std::uint16_t>(chunk.data(), n)
                                                     : largest<std::uint32_t>(chunk.data(), n));
      if (at == 0 || at + n == ids) crc = crc32(crc, chunk.data(), static_cast<uInt>(layout_.idBytes * n));
    }
    identity_ = fmt::format("{} tokens{}, crc32 of the first and last MiB {:08x}", ids,
                            layout_.idBytes == 2 ? "" : " (uint32)", crc);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

const char* TokenFile::idType() const { return layout_.idBytes == 4 ? "uint32" : "uint16"; }

std::uint32_t TokenFile::idAt(const unsigned char* ids, std::uint64_t i) const {
  // Little-endian, and need not be aligned (llm.c's header keeps them aligned, nanoGPT's too).
  if (layout_.idBytes == 2) {
    std::uint16_t id;
    std::memcpy(&id, ids + 2 * i, sizeof id);
    return id;
  }
  std::uint32_t id;
  std::memcpy(&id, ids + 4 * i, sizeof id);
  return id;
}

TokenFile::~TokenFile() {
  ::close(fd_);
}

void TokenFile::copy(std::uint64_t offset, std::uint64_t n, std::int64_t* out) const {
  if (offset > layout_.count || n > layout_.count - offset) {
    throw DataError(fmt::format("{}: ids {}..{} are past its {} tokens", path_, offset, offset + n, layout_.count));
  }
  // pread, not a mapping: a file cut short while training (truncate, a rewrite in place)
  // is a DataError naming it here, where a mapping's reader would die of SIGBUS.
  thread_local std::vector<unsigned char> bytes;
  bytes.resize(layout_.idBytes * n);
  readAt(fd_, layout_.offset + layout_.idBytes * offset, bytes.data(), bytes.size(),
         fmt::format("{} (changed while training?)", path_));
  for (std::uint64_t i = 0; i < n; ++i) out[i] = idAt(bytes.data(), i);
}

}  // namespace pstrain::data
