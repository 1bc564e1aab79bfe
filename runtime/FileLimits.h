#pragma once
// The bounds that every reader of a file someone else wrote applies, each in one place: the
// pickle reader (zip/Pickle.h: checkpoints, state dicts, model files before libtorch reads
// them), the JSON of safetensors headers and shard indexes, .npz headers. Torch-free.
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace pstrain {

// How deep values may nest (a tuple in a list in a dict ...): a value that is freed, copied
// or printed recursively (by pstrain's readers, or by libtorch's unpickler after them) must
// not overflow the stack. A state dict nests 4 deep, a TorchScript module about 2 a module
// level; a million nested tuples (a 1 MB pickle) would kill the process.
constexpr int kMaxNesting = 128;

// The most elements a tensor of a file may have: 2^62 (no machine holds more; below it, an
// element count times an element size of up to 16 bytes cannot overflow 64 bits).
constexpr std::uint64_t kMaxElements = std::uint64_t(1) << 62;

// The elements of a tensor of `sizes` (1 for none: a scalar), or nullopt when a size is
// negative or the product passes kMaxElements (it would wrap: sizes (2^20, 2^44) are 0 in
// 64 bits). Any size 0 makes 0 elements, whatever the others.
inline std::optional<std::uint64_t> elementCount(const std::vector<std::int64_t>& sizes) {
  std::uint64_t count = 1;
  bool overflows = false;
  for (const std::int64_t size : sizes) {
    if (size < 0) return std::nullopt;
    if (size == 0) return 0;
    const auto s = static_cast<std::uint64_t>(size);
    if (count > kMaxElements / s) overflows = true;
    else count *= s;
  }
  if (overflows) return std::nullopt;
  return count;
}

// Whether the view (`offset`, `sizes`, `strides`: in elements, non-negative, as many strides
// as sizes) reads only within a storage of `storageElements` elements: its last element's
// index, offset + sum of (size - 1) x stride, lies before the storage's end. A view of no
// element reads nothing.
inline bool viewWithin(std::int64_t offset, const std::vector<std::int64_t>& sizes,
                       const std::vector<std::int64_t>& strides, std::uint64_t storageElements) {
  if (offset < 0 || sizes.size() != strides.size()) return false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || strides[d] < 0) return false;
  }
  for (const std::int64_t size : sizes) {
    if (size == 0) return true;
  }
  unsigned __int128 last = static_cast<std::uint64_t>(offset);
  if (last >= storageElements) return false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    // Below the storage's end (< 2^64) plus a term below 2^126: no wrap in 128 bits.
    last += static_cast<unsigned __int128>(static_cast<std::uint64_t>(sizes[d] - 1)) *
            static_cast<std::uint64_t>(strides[d]);
    if (last >= storageElements) return false;
  }
  return true;
}

}  // namespace pstrain
