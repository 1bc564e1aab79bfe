#pragma once
// An in-memory dataset: samples (raw uint8 images, or any float32 array from an .npz),
// int64 class labels or float32 regression targets, the per-channel normalisation applied
// when a batch is taken and, for CIFAR training sets, random-crop (4-pixel zero padding)
// and horizontal-flip augmentation.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::data {

enum class Split { Train, Test };

struct DatasetInfo {
  std::string name;
  std::string description;
  std::vector<std::int64_t> shape;  // of one sample: C, H, W for images
  int classes;             // 0: regression (float targets)
  std::string defaultDir;  // where it is looked for without --data-dir (in dataRoot(); "": needs no files)
};

// Where the built-in datasets' folders are: $PSTRAIN_DATA_DIR, else /usr/share/datasets
// (Debian's dataset packages).
std::string dataRoot();

std::vector<DatasetInfo> datasetList();

// A built-in dataset's, or that of an .npz file (config::isDatasetFile), read from the file's
// headers and labels. Throws ConfigError listing the known names, or DataError naming the
// file and what is wrong with it.
DatasetInfo datasetInfo(const std::string& name);

struct Dataset {
  std::string name;
  at::Tensor images;  // the samples [N, ...]: uint8 (pixels, scaled by 1/255) or float32
  at::Tensor labels;  // int64 [N], each in [0, classes), or float32 [N, ...] targets
  int classes = 10;   // 0: regression
  std::vector<double> mean;  // per channel (dim 1), of pixel / 255 or of the float value
  std::vector<double> std;
  bool augment = false;  // random crop + flip in batch()
  std::string fileIdentity;  // an .npz's: its arrays' CRC-32s, compared across ranks

  std::int64_t size() const { return labels.size(0); }

  // float [B, ...] = (augment(images[indices]) (/ 255 for uint8) - mean) / std, and the labels.
  // The augmentation is drawn from `augmentSeed` alone, so a batch is reproducible.
  std::pair<at::Tensor, at::Tensor> batch(const std::vector<std::int64_t>& indices,
                                          std::uint64_t augmentSeed = 0) const;
  at::Tensor normalize(const at::Tensor& samples) const;
};

// Loads `split` of dataset `name` from `dir` (empty: its defaultDir), or of the .npz file
// `name` (its arrays x_train, y_train, x_test, y_test; optional mean and std, per channel;
// optional classes, a scalar). `syntheticSize` is the training-set size of the synthetic
// datasets (their test sets are a sixth of that, at least 100). Throws DataError naming
// the file and what to do when files are missing or bad.
Dataset loadDataset(const std::string& name, const std::string& dir, Split split,
                    std::int64_t syntheticSize);

}  // namespace pstrain::data
