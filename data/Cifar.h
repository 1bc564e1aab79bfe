#pragma once
// Reader of the CIFAR-10 and CIFAR-100 binary formats ("binary version" archives):
// records of label byte(s) followed by 3072 pixel bytes (1024 red, 1024 green, 1024 blue,
// row-major 32x32). CIFAR-10: 1 label byte, data_batch_1..5.bin and test_batch.bin;
// CIFAR-100: coarse and fine label bytes (the fine one is used), train.bin and test.bin.
// Validates sizes and labels; any problem is a DataError naming the file.
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::data {

struct CifarArrays {
  std::vector<std::uint8_t> pixels;  // N x 3 x 32 x 32
  std::vector<std::uint8_t> labels;  // N
};

// Reads and concatenates `files` (paths) of the given variant (10 or 100 classes).
CifarArrays readCifar(const std::vector<std::string>& files, int classes);

// Writes records in the format of `classes` (10 or 100; the coarse label written is 0).
void writeCifar(const std::string& path, const CifarArrays& arrays, int classes);

}  // namespace pstrain::data
