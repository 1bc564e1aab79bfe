#pragma once
// An in-memory image-classification dataset: raw uint8 images, int64 labels and the
// per-channel normalisation applied when a batch is taken.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::data {

enum class Split { Train, Test };

struct Dataset {
  std::string name;
  at::Tensor images;  // uint8 [N, C, H, W]
  at::Tensor labels;  // int64 [N], each in [0, classes)
  int classes = 10;
  std::vector<double> mean;  // per channel, of pixel / 255
  std::vector<double> std;

  std::int64_t size() const { return labels.size(0); }

  // float [B, C, H, W] = (images[indices] / 255 - mean) / std, and labels[indices].
  std::pair<at::Tensor, at::Tensor> batch(const std::vector<std::int64_t>& indices) const;
  at::Tensor normalize(const at::Tensor& uint8Images) const;
};

// The datasets `loadDataset` knows, with a line of description each.
std::vector<std::pair<std::string, std::string>> datasetList();

// Where `name` is looked for when --data-dir is not given.
std::string defaultDataDir(const std::string& name);

// Loads `split` of dataset `name` from `dir` (empty: defaultDataDir). `syntheticSize` is
// the training-set size of "synthetic" (its test set is a sixth of that, at least 100).
// Throws DataError naming the file and what to do when files are missing or bad.
Dataset loadDataset(const std::string& name, const std::string& dir, Split split,
                    std::int64_t syntheticSize);

}  // namespace pstrain::data
