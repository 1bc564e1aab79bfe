#pragma once
// Reader of the IDX format of MNIST and Fashion-MNIST (unsigned-byte data only), gzipped or
// plain: zlib reads both. Validates the magic number, the dimensions against what the
// caller expects, and that the file holds exactly the promised bytes; any problem is a
// DataError naming the file.
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::data {

struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> bytes;  // row-major, product(dims) bytes
};

// `rank` is the number of dimensions the file must have (3 for images, 1 for labels).
IdxArray readIdx(const std::string& path, int rank);

// Writes `array` as IDX, gzipped when the path ends in ".gz" (for tests and tools).
void writeIdx(const std::string& path, const IdxArray& array);

}  // namespace pstrain::data
