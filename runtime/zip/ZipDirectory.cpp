#include "runtime/zip/ZipDirectory.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>

namespace pstrain::zip {
namespace {

constexpr std::size_t kMaxComment = 65535;

struct Directory {
  std::uint64_t entries = 0, size = 0, offset = 0;
  std::uint64_t end = 0;         // the end record's offset
  std::uint64_t end64 = 0;       // the zip64 end record's offset (when zip64)
  bool zip64 = false;
};

// The end-of-central-directory record (within the last 22 + 65535 bytes), and the zip64
// one where the classic fields say 0xffff...
Directory findDirectory(std::uint64_t size, const ReadAt& read, const Fail& fail) {
  if (size < kEndBytes) fail("too short for a zip archive (no zip directory)");
  const std::size_t tail = static_cast<std::size_t>(std::min<std::uint64_t>(size, kEndBytes + kMaxComment));
  std::vector<unsigned char> end(tail);
  read(size - tail, end.data(), tail);
  std::size_t at = std::string::npos;
  for (std::size_t i = tail - kEndBytes + 1; i-- > 0;) {
    if (littleEndian(&end[i], 4) == kEnd) {
      at = i;
      break;
    }
  }
  if (at == std::string::npos) fail("no zip directory");
  const std::uint64_t endOffset = size - tail + at;
  Directory d{littleEndian(&end[at + 10], 2), littleEndian(&end[at + 12], 4), littleEndian(&end[at + 16], 4),
              endOffset};
  if (d.entries == 0xffff || d.size == 0xffffffff || d.offset == 0xffffffff) {  // zip64
    unsigned char locator[kEnd64LocatorBytes], end64[kEnd64Bytes];
    if (endOffset < sizeof locator) fail("truncated zip64 directory");
    read(endOffset - sizeof locator, locator, sizeof locator);
    if (littleEndian(locator, 4) != kEnd64Locator) fail("missing zip64 locator");
    const std::uint64_t at64 = littleEndian(locator + 8, 8);
    if (at64 > size || size - at64 < sizeof end64) fail("zip64 directory record outside the file");
    read(at64, end64, sizeof end64);
    if (littleEndian(end64, 4) != kEnd64) fail("bad zip64 directory record");
    d = {littleEndian(end64 + 32, 8), littleEndian(end64 + 40, 8), littleEndian(end64 + 48, 8), endOffset, at64, true};
  }
  if (d.offset > size || d.size > size - d.offset || d.entries > d.size / kCentralBytes) {
    fail("truncated or corrupt: the zip directory does not fit the file");
  }
  return d;
}

// Zip64 sizes and offset, in this order, for the fields of `e` that say 0xffffffff.
void readZip64Extra(const std::vector<unsigned char>& cd, std::size_t from, std::size_t to, Entry& e, const Fail& fail) {
  for (std::size_t x = from; x + 4 <= to;) {
    const std::size_t id = littleEndian(&cd[x], 2), len = littleEndian(&cd[x + 2], 2);
    if (x + 4 + len > to) break;
    if (id == 1) {
      std::size_t q = x + 4;
      for (std::uint64_t* field : {&e.size, &e.compressedSize, &e.localOffset}) {
        if (*field != 0xffffffff) continue;
        if (q + 8 > x + 4 + len) fail(fmt::format("corrupt zip64 field of {}", e.name));
        *field = littleEndian(&cd[q], 8);
        q += 8;
      }
    }
    x += 4 + len;
  }
}

}  // namespace

std::uint32_t crc32Of(std::uint32_t crc, const void* data, std::size_t size) {
  uLong value = crc;
  for (std::size_t offset = 0; offset < size;) {  // zlib's crc32 takes at most a uInt at a time
    const auto n = static_cast<uInt>(std::min<std::size_t>(size - offset, 1u << 30));
    value = ::crc32(value, static_cast<const Bytef*>(data) + offset, n);
    offset += n;
  }
  return static_cast<std::uint32_t>(value);
}

std::uint64_t littleEndian(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

std::vector<Entry> readDirectory(std::uint64_t size, const ReadAt& read, const Fail& fail) {
  const Directory d = findDirectory(size, read, fail);
  std::vector<unsigned char> cd(static_cast<std::size_t>(d.size));
  if (!cd.empty()) read(d.offset, cd.data(), cd.size());
  std::vector<Entry> entries;
  std::size_t p = 0;
  for (std::uint64_t i = 0; i < d.entries; ++i) {
    if (p + kCentralBytes > cd.size() || littleEndian(&cd[p], 4) != kCentralHeader) fail("corrupt zip directory");
    const std::size_t nameLen = littleEndian(&cd[p + 28], 2), extraLen = littleEndian(&cd[p + 30], 2),
                      commentLen = littleEndian(&cd[p + 32], 2);
    if (p + kCentralBytes + nameLen + extraLen + commentLen > cd.size()) fail("corrupt zip directory");
    Entry e;
    e.centralOffset = d.offset + p;
    const std::uint64_t flags = littleEndian(&cd[p + 8], 2);
    e.encrypted = (flags & 1) != 0;
    e.descriptor = (flags & 8) != 0;
    e.method = static_cast<int>(littleEndian(&cd[p + 10], 2));
    e.crc = static_cast<std::uint32_t>(littleEndian(&cd[p + 16], 4));
    e.compressedSize = littleEndian(&cd[p + 20], 4);
    e.size = littleEndian(&cd[p + 24], 4);
    e.localOffset = littleEndian(&cd[p + 42], 4);
    e.name.assign(reinterpret_cast<const char*>(&cd[p + kCentralBytes]), nameLen);
    constexpr std::uint64_t kDosDirectory = 0x10;  // of the external attributes' low byte
    e.directory = (!e.name.empty() && e.name.back() == '/') || (littleEndian(&cd[p + 38], 4) & kDosDirectory) != 0;
    readZip64Extra(cd, p + kCentralBytes + nameLen, p + kCentralBytes + nameLen + extraLen, e, fail);
    entries.push_back(std::move(e));
    p += kCentralBytes + nameLen + extraLen + commentLen;
  }
  return entries;
}

std::vector<Span> directorySpans(std::uint64_t size, const ReadAt& read, const Fail& fail) {
  const Directory d = findDirectory(size, read, fail);
  std::vector<Span> spans{{d.offset, d.offset + d.size}, {d.end, size}};
  if (d.zip64) {
    spans.push_back({d.end64, d.end64 + kEnd64Bytes});
    spans.push_back({d.end - kEnd64LocatorBytes, d.end});
  }
  return spans;
}

std::uint64_t dataOffset(const Entry& entry, std::uint64_t size, const ReadAt& read, const Fail& fail) {
  unsigned char local[kLocalBytes];
  if (entry.localOffset > size || size - entry.localOffset < kLocalBytes) {
    fail(fmt::format("record {} has no local header", entry.name));
  }
  read(entry.localOffset, local, sizeof local);
  if (littleEndian(local, 4) != kLocalHeader) fail(fmt::format("record {} has no local header", entry.name));
  const std::uint64_t data = entry.localOffset + kLocalBytes + littleEndian(local + 26, 2) + littleEndian(local + 28, 2);
  if (data > size || entry.compressedSize > size - data) {
    fail(fmt::format("record {} extends past the end of the file (truncated)", entry.name));
  }
  return data;
}

}  // namespace pstrain::zip
