#pragma once
// An in-memory image-classification dataset: raw uint8 images, int64 labels, the
// per-channel normalisation applied when a batch is taken and, for CIFAR training sets,
// random-crop (4-pixel zero padding) and horizontal-flip augmentation.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::data {

enum class Split { Train, Test };

struct DatasetInfo {
  std::string name;
  std::string description;
  std::vector<std::int64_t> shape;  // C, H, W of one sample
  int classes;
  std::string defaultDir;  // where it is looked for without --data-dir ("" : needs no files)
};

std::vector<DatasetInfo> datasetList();

// Throws ConfigError listing the known names.
const DatasetInfo& datasetInfo(const std::string& name);

struct Dataset {
  std::string name;
  at::Tensor images;  // uint8 [N, C, H, W]
  at::Tensor labels;  // int64 [N], each in [0, classes)
  int classes = 10;
  std::vector<double> mean;  // per channel, of pixel / 255
  std::vector<double> std;
  bool augment = false;  // random crop + flip in batch()

  std::int64_t size() const { return labels.size(0); }

  // float [B, C, H, W] = (augment(images[indices]) / 255 - mean) / std, and the labels.
  // The augmentation is drawn from `augmentSeed` alone, so a batch is reproducible.
  std::pair<at::Tensor, at::Tensor> batch(const std::vector<std::int64_t>& indices,
                                          std::uint64_t augmentSeed = 0) const;
  at::Tensor normalize(const at::Tensor& uint8Images) const;
};

// Loads `split` of dataset `name` from `dir` (empty: its defaultDir). `syntheticSize` is
// the training-set size of the synthetic datasets (their test sets are a sixth of that, at
// least 100). Throws DataError naming the file and what to do when files are missing or bad.
Dataset loadDataset(const std::string& name, const std::string& dir, Split split,
                    std::int64_t syntheticSize);

}  // namespace pstrain::data
