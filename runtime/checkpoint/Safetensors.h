#pragma once
// The safetensors format (Hugging Face's spec, what MLX and transformers read and write):
// 8 bytes, a little-endian u64 N; N bytes of a JSON header (UTF-8, a first '{', maybe
// spaces at the end): {"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN,
// END]}, ..., "__metadata__": {"KEY": "VALUE", ...}}; then the tensors' bytes, each tensor's
// [BEGIN, END) of them, little-endian, in C order, together covering them without a gap or
// an overlap. Torch-free: the header's reader and writer (checkpoint/WeightsFile makes the
// tensors).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/zip/ZipDirectory.h"

namespace pstrain::checkpoint {

// The spec's limit on N (its reference reader's): a header of more is refused unread.
constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", "I64" ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // of the bytes after the header
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in the header's order
  std::vector<std::pair<std::string, std::string>> metadata;
  std::uint64_t dataStart = 0;  // where the tensors' bytes begin in the file: 8 + N
};

// N of the safetensors file of `fileSize` bytes that begins with `first` (its first 8 bytes
// or more), checked: within the file and the spec's limit, and long enough for "{}". Calls
// `fail` (which must throw) otherwise: a file whose N is 0 is refused before anything more
// of it is read.
std::uint64_t safetensorsHeaderLength(std::string_view first, std::uint64_t fileSize, const zip::Fail& fail);

// The header `text` (the N bytes after the first 8) of a safetensors file of `fileSize`
// bytes, checked: a JSON object (zip/Json.h: strict, UTF-8, bounded nesting) of no duplicate
// name whose entries each have a dtype of the spec, a shape of counts and data offsets that
// hold exactly its elements, within the data, which they cover whole without overlapping, and
// metadata of strings only. Calls `fail` (which must throw) with what is wrong at the first
// problem.
SafetensorsHeader readSafetensorsHeader(std::string_view text, std::uint64_t fileSize, const zip::Fail& fail);

// The 8 bytes of N and the header of `tensors`, whose data offsets it sets (laid out back
// to back in their order), with `metadata` after "format": "pt" (which transformers' loader
// requires of every file); padded with spaces so that the data begin at a multiple of 8
// bytes, as Hugging Face's writer aligns them.
std::string writeSafetensorsHeader(std::vector<SafetensorsEntry>& tensors,
                                   const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace pstrain::checkpoint
