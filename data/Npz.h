#pragma once
// Reader of NumPy's .npz archives (np.savez: stored members; np.savez_compressed: deflated),
// zip64 included, whose members are .npy arrays. Torch-free, so that it can be fuzzed: an
// array's data go straight into memory the caller provides (a tensor's), so loading never
// holds a second copy. Validates the zip structure, the .npy headers, sizes and every
// member's CRC-32; any problem is a DataError naming the file and the array.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/zip/ZipDirectory.h"

namespace pstrain::data {

struct NpyArray {
  std::string dtype;                // "u1", "i2", "u2", "i4", "i8", "f4" or "f8" (little-endian); "u4" for token ids
  std::vector<std::int64_t> shape;  // () for a scalar
  std::size_t itemSize = 0;         // bytes per element
  bool fortranOrder = false;
  std::uint64_t elements() const;   // product of the shape
};

// The array of a whole .npy file whose first `size` bytes are `head` (its magic, version and
// header dict must lie within them), its data starting at `dataOffset`. `dtypes`: the
// little-endian types it may hold, by NumPy's letter code ("u2"), with their sizes. Throws
// DataError naming `what`.
NpyArray npyFileHeader(const unsigned char* head, std::size_t size, const std::map<std::string, std::size_t>& dtypes,
                       std::uint64_t& dataOffset, const std::string& what);

class NpzFile {
 public:
  // Opens `path` and reads its central directory.
  explicit NpzFile(const std::string& path);
  ~NpzFile();
  NpzFile(const NpzFile&) = delete;
  NpzFile& operator=(const NpzFile&) = delete;

  const std::string& path() const { return path_; }
  // The arrays, by the names np.savez was given ("x_train" for member "x_train.npy").
  bool has(const std::string& name) const { return members_.count(name) > 0; }
  std::vector<std::string> names() const;
  // The array's dtype and shape, from its header alone.
  NpyArray header(const std::string& name) const;
  // Reads array `name` whole: `destination(header)` returns where its elements() x itemSize
  // bytes go (row-major, as in the file). Checks the member's size and CRC-32.
  NpyArray read(const std::string& name, const std::function<void*(const NpyArray&)>& destination) const;
  // The member's CRC-32 as the directory records it (identifies the data without reading it).
  std::uint32_t checksum(const std::string& name) const;

  using Member = zip::Entry;

 private:
  const Member& member(const std::string& name) const;
  std::string path_;
  int fd_ = -1;
  std::uint64_t fileSize_ = 0;
  std::map<std::string, Member> members_;
};

}  // namespace pstrain::data
