#include "data/Cifar.h"

#include <fmt/format.h>

#include <fstream>

#include "data/ReadAt.h"
#include "runtime/Errors.h"

namespace pstrain::data {

constexpr std::size_t kPixels = 3 * 32 * 32;

CifarArrays readCifar(const std::vector<std::string>& files, int classes) {
  const std::size_t labelBytes = classes == 100 ? 2 : 1;
  const std::size_t record = labelBytes + kPixels;
  CifarArrays out;
  for (const auto& path : files) {
    const int fd = openDataFile(path);
    if (fd < 0) throw DataError(fmt::format("{}: cannot open: No such file or unreadable", path));
    struct FdCloser {
      int fd;
      ~FdCloser() { ::close(fd); }
    } closer{fd};
    const auto size = static_cast<std::size_t>(sizeOfDataFile(fd, path));
    if (size == 0 || size % record != 0) {
      throw DataError(fmt::format("{}: {} bytes is not a whole number of {}-byte CIFAR-{} records "
                                  "(truncated, or the wrong file)", path, size, record, classes));
    }
    std::vector<std::uint8_t> bytes(size);
    readAt(fd, 0, bytes.data(), size, path);
    const std::size_t n = size / record;
    const std::size_t first = out.labels.size();
    out.labels.resize(first + n);
    out.pixels.resize((first + n) * kPixels);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t* r = bytes.data() + i * record;
      const std::uint8_t label = r[labelBytes - 1];
      if (label >= classes) {
        throw DataError(fmt::format("{}: record {} has label {}, not in 0..{} (a CIFAR-{} file read as "
                                    "CIFAR-{}?)", path, i, label, classes - 1, classes == 10 ? 100 : 10, classes));
      }
      out.labels[first + i] = label;
      std::copy(r + labelBytes, r + record, out.pixels.begin() + static_cast<std::ptrdiff_t>((first + i) * kPixels));
    }
  }
  return out;
}

void writeCifar(const std::string& path, const CifarArrays& arrays, int classes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (std::size_t i = 0; i < arrays.labels.size(); ++i) {
    if (classes == 100) out.put(0);
    out.put(static_cast<char>(arrays.labels[i]));
    out.write(reinterpret_cast<const char*>(arrays.pixels.data() + i * kPixels), kPixels);
  }
  if (!out) throw DataError(fmt::format("{}: write failed", path));
}

}  // namespace pstrain::data
