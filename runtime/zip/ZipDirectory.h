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

struct Entry {
  std::string name;
  std::uint64_t localOffset = 0;  // of the entry's local header
  std::uint64_t compressedSize = 0;
  std::uint64_t size = 0;         // uncompressed
  std::uint32_t crc = 0;
  int method = 0;                 // 0 stored, 8 deflated
  bool encrypted = false;
};

// Reads exactly `n` bytes at `offset` into `out`, or throws.
using ReadAt = std::function<void(std::uint64_t offset, void* out, std::size_t n)>;
// Throws the caller's error for a malformed archive; `what` says what is wrong.
using Fail = std::function<void(const std::string& what)>;

// The entries of the archive of `size` bytes, in directory order.
std::vector<Entry> readDirectory(std::uint64_t size, const ReadAt& read, const Fail& fail);

// Where `entry`'s data begin (after its local header, which must be there), checked to lie
// with its compressed size within the archive.
std::uint64_t dataOffset(const Entry& entry, std::uint64_t size, const ReadAt& read, const Fail& fail);

// Little-endian unsigned integer of `bytes` bytes.
std::uint64_t littleEndian(const unsigned char* p, int bytes);

}  // namespace pstrain::zip
