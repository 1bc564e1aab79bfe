#pragma once
// The central directory of a zip archive (zip64 included): what .npz files (data/Npz) and
// PyTorch's archives (checkpoint/ArchiveCheck) are. Torch-free; reads through a callback so
// that a file (pread) and bytes in memory are read alike, and every offset and size it
// returns lies within the archive.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pstrain::zip {

// The format's signatures and fixed sizes (PKWARE's APPNOTE.TXT), for the reader and ZipWriter.
constexpr std::uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kDataDescriptor = 0x08074b50,
                        kEnd = 0x06054b50, kEnd64 = 0x06064b50, kEnd64Locator = 0x07064b50;
constexpr std::size_t kLocalBytes = 30, kCentralBytes = 46, kEndBytes = 22, kEnd64Bytes = 56, kEnd64LocatorBytes = 20;

struct Entry {
  std::string name;
  std::uint64_t centralOffset = 0;  // of the entry's header in the central directory
  std::uint64_t localOffset = 0;  // of the entry's local header
  std::uint64_t compressedSize = 0;
  std::uint64_t size = 0;         // uncompressed
  std::uint32_t crc = 0;
  int method = 0;                 // 0 stored, 8 deflated
  bool encrypted = false;
  bool descriptor = false;        // a data descriptor follows its data
  // Marked a directory (its name ends with '/', or its DOS attributes say so): a zip reader
  // such as miniz (libtorch's) extracts nothing of it, whatever its sizes say.
  bool directory = false;
};

// The bytes [begin, end) of an archive.
struct Span {
  std::uint64_t begin = 0, end = 0;
  bool overlaps(const Span& other) const { return begin < other.end && other.begin < end; }
};

// The largest data descriptor (zip64, with its optional signature).
constexpr std::size_t kMaxDescriptorBytes = 24;

// Reads exactly `n` bytes at `offset` into `out`, or throws.
using ReadAt = std::function<void(std::uint64_t offset, void* out, std::size_t n)>;
// Throws the caller's error for a malformed archive; `what` says what is wrong.
using Fail = std::function<void(const std::string& what)>;

// The entries of the archive of `size` bytes, in directory order.
std::vector<Entry> readDirectory(std::uint64_t size, const ReadAt& read, const Fail& fail);

// Where the directory itself lies in the archive of `size` bytes: the central directory,
// the zip64 end record and its locator (if any), and the end record to the end of the file.
std::vector<Span> directorySpans(std::uint64_t size, const ReadAt& read, const Fail& fail);

// Where `entry`'s data begin (after its local header, which must be there), checked to lie
// with its compressed size within the archive.
std::uint64_t dataOffset(const Entry& entry, std::uint64_t size, const ReadAt& read, const Fail& fail);

// The CRC-32 of `crc`'s bytes followed by `size` more (crc 0: none before).
std::uint32_t crc32Of(std::uint32_t crc, const void* data, std::size_t size);

// Little-endian unsigned integer of `bytes` bytes.
std::uint64_t littleEndian(const unsigned char* p, int bytes);

}  // namespace pstrain::zip
