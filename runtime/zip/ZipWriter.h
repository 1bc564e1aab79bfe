#pragma once
// A zip archive written as PyTorch's own writer writes one (caffe2's PyTorchStreamWriter:
// what torch.save and torch.jit.save make), but with each record's bytes given in pieces:
// PyTorch's writer takes a record whole and checksums it before writing, so a record made
// of other ranks' bytes had to be put together in memory first.
//
// The layout is the one PyTorch's makes and reads: every record stored (not compressed),
// its data aligned to 64 bytes by padding in the local header's extra field, general purpose
// flags 0x0808 (UTF-8 names; a data descriptor after the data holds the CRC-32 and sizes,
// the local header zeros; an empty record has none, 0x0800), no times: byte for byte what
// libtorch 1.13's writer makes of the same records. Zip64 fields where a size or an offset
// needs them.
// Torch-free.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain::zip {

class ZipWriter {
 public:
  // Where the archive's bytes go, in order (never sought back).
  using Sink = std::function<void(const void* data, std::size_t bytes)>;
  // `zip64Above`: sizes and offsets above it take zip64 fields (the format's limit; a test
  // lowers it to write zip64 in a small archive).
  explicit ZipWriter(Sink out, std::uint64_t zip64Above = 0xFFFFFFFEu);

  // The record `name` of exactly `size` bytes, which `fill` gives to the Sink it is passed
  // in as many pieces as it likes. Throws std::logic_error when they are not `size` bytes
  // (the archive is then unusable).
  void record(const std::string& name, std::uint64_t size, const std::function<void(const Sink&)>& fill);
  // The record `name` holding `bytes`.
  void record(const std::string& name, const void* bytes, std::size_t size);
  // A record copied as another archive holds it: `compressed` in compression `method` (8:
  // deflate), which inflates to `size` bytes whose CRC-32 is `crc`.
  void copy(const std::string& name, int method, std::uint32_t crc, std::uint64_t size, std::string_view compressed);
  // The central directory: the archive is complete. No record may follow.
  void finish();

  std::uint64_t bytesWritten() const { return offset_; }

 private:
  struct Written {
    std::string name;
    int method;
    std::uint64_t offset, size, compressedSize;
    std::uint32_t crc;
  };
  void put(const std::vector<unsigned char>& bytes);
  // Whether a record's sizes take zip64 fields.
  bool needsZip64(std::uint64_t size, std::uint64_t compressedSize) const;
  // The local header of a record of `size` bytes (inflated; `compressedSize` as stored), at offset_.
  void localHeader(const std::string& name, int method, std::uint64_t size, std::uint64_t compressedSize);
  // The data descriptor after the data of `r` (local header at r.offset), and its entry.
  void endRecord(Written r);

  Sink out_;
  std::uint64_t zip64Above_;
  std::uint64_t offset_ = 0;
  std::vector<Written> records_;
  bool finished_ = false;
};

}  // namespace pstrain::zip
