#include "runtime/zip/ZipWriter.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/zip/ZipDirectory.h"

namespace pstrain::zip {
namespace {

constexpr std::uint64_t kAlignment = 64;  // of every record's data, as PyTorch's writer aligns it (and mmap loads rely on)
// Bit 11: UTF-8 names; bit 3: sizes and CRC in a data descriptor, except for an empty record,
// whose local header's zeros are right (PyTorch's writer does the same).
constexpr std::uint16_t kUtf8 = 0x0800, kDescriptor = 0x0008;
std::uint16_t flagsFor(std::uint64_t size) { return size ? kUtf8 | kDescriptor : kUtf8; }
constexpr std::uint16_t kZip64Version = 45, kMadeBy = 0x031e;  // made by: Unix, format 3.0 (miniz's)
constexpr std::uint16_t kZip64Extra = 0x0001, kPaddingExtra = 0x4246;  // "FB": PyTorch's padding field
constexpr std::uint32_t k32 = 0xFFFFFFFFu;

// Little-endian fields appended to a header.
struct Bytes {
  std::vector<unsigned char> v;
  Bytes& le(std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) v.push_back(static_cast<unsigned char>(value >> (8 * i)));
    return *this;
  }
  Bytes& text(const std::string& s) {
    v.insert(v.end(), s.begin(), s.end());
    return *this;
  }
};

}  // namespace

ZipWriter::ZipWriter(Sink out, std::uint64_t zip64Above) : out_(std::move(out)), zip64Above_(zip64Above) {}

void ZipWriter::put(const std::vector<unsigned char>& bytes) {
  out_(bytes.data(), bytes.size());
  offset_ += bytes.size();
}

bool ZipWriter::needsZip64(std::uint64_t size, std::uint64_t compressedSize) const {
  return std::max(size, compressedSize) > zip64Above_;
}

void ZipWriter::localHeader(const std::string& name, int method, std::uint64_t size, std::uint64_t compressedSize) {
  const bool zip64 = needsZip64(size, compressedSize);
  if (finished_) throw std::logic_error("zip record " + name + " after the central directory");
  // Sizes and CRC zero (they follow the data); a zip64 field where the descriptor's sizes
  // take 8 bytes; padding up to the next 64-byte boundary.
  const std::uint64_t fixed = kLocalBytes + name.size() + (zip64 ? 20 : 0) + 4;
  const std::uint64_t padding = (kAlignment - (offset_ + fixed) % kAlignment) % kAlignment;
  Bytes local;
  local.le(kLocalHeader, 4).le(zip64 ? kZip64Version : 0, 2).le(flagsFor(size), 2).le(method, 2).le(0, 4);
  local.le(0, 4).le(0, 4).le(0, 4).le(name.size(), 2).le(fixed - kLocalBytes - name.size() + padding, 2).text(name);
  if (zip64) local.le(kZip64Extra, 2).le(16, 2).le(0, 8).le(0, 8);
  local.le(kPaddingExtra, 2).le(padding, 2).text(std::string(padding, 'Z'));
  put(local.v);
}

void ZipWriter::endRecord(Written r) {
  const bool zip64 = needsZip64(r.size, r.compressedSize);
  if (flagsFor(r.size) & kDescriptor) {
    Bytes descriptor;
    descriptor.le(kDataDescriptor, 4).le(r.crc, 4).le(r.compressedSize, zip64 ? 8 : 4).le(r.size, zip64 ? 8 : 4);
    put(descriptor.v);
  }
  records_.push_back(std::move(r));
}

void ZipWriter::record(const std::string& name, std::uint64_t size, const std::function<void(const Sink&)>& fill) {
  const std::uint64_t at = offset_;
  localHeader(name, 0, size, size);
  std::uint64_t given = 0;
  std::uint32_t crc = 0;
  fill([&](const void* data, std::size_t bytes) {
    given += bytes;
    if (given > size) throw std::logic_error("zip record " + name + " given more than its " + std::to_string(size) + " bytes");
    crc = crc32Of(crc, data, bytes);
    out_(data, bytes);
    offset_ += bytes;
  });
  if (given != size) {
    throw std::logic_error("zip record " + name + " given " + std::to_string(given) + " of its " + std::to_string(size) + " bytes");
  }
  endRecord({name, 0, at, size, size, crc});
}

void ZipWriter::record(const std::string& name, const void* bytes, std::size_t size) {
  record(name, size, [&](const Sink& write) { write(bytes, size); });
}

void ZipWriter::copy(const std::string& name, int method, std::uint32_t crc, std::uint64_t size,
                     std::string_view compressed) {
  const std::uint64_t at = offset_;
  localHeader(name, method, size, compressed.size());
  out_(compressed.data(), compressed.size());
  offset_ += compressed.size();
  endRecord({name, method, at, size, compressed.size(), crc});
}

void ZipWriter::finish() {
  if (finished_) return;
  finished_ = true;
  const std::uint64_t directoryAt = offset_;
  for (const Written& r : records_) {
    const bool bigSize = needsZip64(r.size, r.compressedSize), farOffset = r.offset > zip64Above_;
    Bytes extra;
    if (bigSize || farOffset) {
      extra.le(kZip64Extra, 2).le((bigSize ? 16 : 0) + (farOffset ? 8 : 0), 2);
      if (bigSize) extra.le(r.size, 8).le(r.compressedSize, 8);
      if (farOffset) extra.le(r.offset, 8);
    }
    Bytes central;
    central.le(kCentralHeader, 4).le(0, 2).le(extra.v.empty() ? 0 : kZip64Version, 2).le(flagsFor(r.size), 2).le(r.method, 2);
    central.le(0, 4).le(r.crc, 4).le(bigSize ? k32 : r.compressedSize, 4).le(bigSize ? k32 : r.size, 4);
    central.le(r.name.size(), 2).le(extra.v.size(), 2).le(0, 2).le(0, 2).le(0, 2).le(0, 4);
    central.le(farOffset ? k32 : r.offset, 4).text(r.name);
    central.v.insert(central.v.end(), extra.v.begin(), extra.v.end());
    put(central.v);
  }
  const std::uint64_t directoryBytes = offset_ - directoryAt, count = records_.size();
  // The zip64 end records always, as PyTorch's writer (miniz) writes them; the classic one
  // says 0xFFFF... where a field does not fit.
  const std::uint64_t end64At = offset_;
  Bytes end64;
  end64.le(kEnd64, 4).le(kEnd64Bytes - 12, 8).le(kMadeBy, 2).le(kZip64Version, 2).le(0, 4).le(0, 4);
  end64.le(count, 8).le(count, 8).le(directoryBytes, 8).le(directoryAt, 8);
  end64.le(kEnd64Locator, 4).le(0, 4).le(end64At, 8).le(1, 4);
  put(end64.v);
  const bool manyRecords = count >= 0xFFFF, far = directoryBytes > zip64Above_ || directoryAt > zip64Above_;
  Bytes end;
  end.le(kEnd, 4).le(0, 2).le(0, 2).le(manyRecords ? 0xFFFF : count, 2).le(manyRecords ? 0xFFFF : count, 2);
  end.le(far ? k32 : directoryBytes, 4).le(far ? k32 : directoryAt, 4).le(0, 2);
  put(end.v);
}

}  // namespace pstrain::zip
