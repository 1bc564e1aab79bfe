#include "data/Idx.h"
#include "data/MemoryBound.h"

#include <fmt/format.h>
#include <zlib.h>

#include <memory>

#include "data/ReadAt.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"

namespace pstrain::data {
namespace {

constexpr std::int64_t kMaxElements = std::int64_t(1) << 34;  // 16 GiB: no real dataset is bigger

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), file_(open(path)) {
    gzbuffer(file_.get(), 1 << 20);
  }

  // `path` as a gzip stream (or plain bytes), opened without waiting on a FIFO.
  static gzFile open(const std::string& path) {
    const int fd = openDataFile(path);
    gzFile file = fd < 0 ? nullptr : gzdopen(fd, "rb");
    if (!file) {
      if (fd >= 0) ::close(fd);
      throw DataError(fmt::format("{}: cannot open: No such file or unreadable", path));
    }
    return file;
  }

  // Reads up to `n` bytes; throws on a decompression error.
  std::size_t read(void* out, std::size_t n) {
    std::size_t total = 0;
    auto* dst = static_cast<char*>(out);
    while (total < n) {
      unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - total, 1u << 30));
      int got = gzread(file_.get(), dst + total, chunk);
      if (got < 0) {
        int code = 0;
        const char* message = gzerror(file_.get(), &code);
        throw DataError(fmt::format("{}: corrupt compressed data ({}); download the file again",
                                    path_, message));
      }
      if (got == 0) break;
      total += static_cast<std::size_t>(got);
    }
    return total;
  }

  void readExactly(void* out, std::size_t n, const char* what) {  // for the header
    std::size_t got = read(out, n);
    if (got != n) {
      throw DataError(fmt::format("{}: truncated: expected {} bytes of {}, found {}", path_, n,
                                  what, got));
    }
  }

 private:
  std::string path_;
  GzFile file_;
};

std::uint32_t bigEndian(const unsigned char* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
}

}  // namespace

IdxArray readIdx(const std::string& path, int rank) {
  Reader in(path);
  unsigned char magic[4];
  in.readExactly(magic, 4, "header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08) {
    throw DataError(fmt::format(
        "{}: not an IDX file of unsigned bytes (magic {:02x}{:02x}{:02x}{:02x}, expected 000008{:02x})",
        path, magic[0], magic[1], magic[2], magic[3], rank));
  }
  if (magic[3] != rank) {
    throw DataError(fmt::format("{}: has {} dimensions, expected {}", path, magic[3], rank));
  }
  IdxArray array;
  std::int64_t elements = 1;
  for (int d = 0; d < rank; ++d) {
    unsigned char word[4];
    in.readExactly(word, 4, "header");
    std::int64_t dim = bigEndian(word);
    if (dim == 0 || dim > kMaxElements / elements) {  // elements * dim > kMaxElements, without overflow
      throw DataError(fmt::format("{}: implausible dimension {} = {}", path, d, dim));
    }
    elements *= dim;
    array.dims.push_back(dim);
  }
  // Bytes as read, and the float tensor they become (images; labels become int64).
  requireMemoryFor(static_cast<double>(elements) * (rank == 1 ? 9 : 5), path, "its data");
  // Grow with the data actually read, so that a garbled header promising gigabytes costs
  // nothing until the file really holds them (found by tests/fuzz/fuzz_idx).
  const auto expected = static_cast<std::size_t>(elements);
  constexpr std::size_t kChunk = std::size_t(16) << 20;
  while (array.bytes.size() < expected) {
    const std::size_t have = array.bytes.size();
    const std::size_t want = std::min(kChunk, expected - have);
    array.bytes.resize(have + want);
    const std::size_t got = in.read(array.bytes.data() + have, want);
    if (got != want) {
      throw DataError(fmt::format("{}: truncated: expected {} bytes of data, found {}", path, expected, have + got));
    }
  }
  char extra;
  if (in.read(&extra, 1) != 0) {
    throw DataError(fmt::format("{}: unexpected bytes after the {} data bytes", path, elements));
  }
  return array;
}

void writeIdx(const std::string& path, const IdxArray& array) {
  bool gz = endsWith(path, ".gz");
  GzFile file(gzopen(path.c_str(), gz ? "wb6" : "wbT"));
  if (!file) throw DataError(fmt::format("{}: cannot create", path));
  std::vector<unsigned char> header = {0, 0, 0x08, static_cast<unsigned char>(array.dims.size())};
  for (auto dim : array.dims) {
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back((dim >> shift) & 0xff);
  }
  bool ok = gzwrite(file.get(), header.data(), static_cast<unsigned>(header.size())) ==
                static_cast<int>(header.size()) &&
            (array.bytes.empty() ||
             gzwrite(file.get(), array.bytes.data(), static_cast<unsigned>(array.bytes.size())) ==
                 static_cast<int>(array.bytes.size()));
  if (!ok || gzclose(file.release()) != Z_OK) throw DataError(fmt::format("{}: write failed", path));
}

}  // namespace pstrain::data
