#pragma once
// A dataset: samples (raw uint8 images, any float32 array or integer token ids from an
// .npz, or windows of a memory-mapped token file), int64 class labels (one per sample or
// per position) or float32 regression targets, the per-channel normalisation applied when
// a batch is taken and, for CIFAR training sets, random-crop (4-pixel zero padding) and
// horizontal-flip augmentation.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/TokenFile.h"
#include "runtime/config/TrainConfig.h"

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
// headers and labels (a label equal to `ignoreIndex` is no class). Throws ConfigError
// listing the known names, or for a token file (whose vocabulary is known once it is
// read: loadDataset), or DataError naming the file and what is wrong with it.
DatasetInfo datasetInfo(const std::string& name, std::int64_t ignoreIndex = -100);

struct Dataset {
  std::string name;
  // The samples [N, ...]: uint8 (pixels, scaled by 1/255), float32, or int64 ids (`ids`).
  at::Tensor images;
  // int64 class labels [N] or one per position [N, L], each in [0, classes) or the ignore
  // index; or float32 [N, ...] targets.
  at::Tensor labels;
  int classes = 10;   // 0: regression
  std::vector<double> mean;  // per channel (dim 1), of pixel / 255 or of the float value
  std::vector<double> std;
  bool augment = false;  // random crop + flip in batch()
  std::int64_t ignoreIndex = -100;  // a label of this value is no target (DataSource)
  bool ids = false;      // the samples are token ids: int64, never scaled or normalised
  std::int64_t maxId = -1;  // with ids: the largest, which the model's vocabulary must take
  std::string fileIdentity;  // a file's (.npz: its arrays' CRC-32s), compared across ranks
  // A token stream (TokenFile.h): a sample is a window of blockSize ids, its targets the
  // next ids. batch() takes window numbers k and starts window k at k x windowStride: the
  // train split's are every offset (stride 1; ShardSampler draws them at random), the test
  // split's a fixed set of windows over the file (loadDataset). `windows`: size().
  std::shared_ptr<const TokenFile> tokens;
  std::int64_t blockSize = 0;
  std::int64_t windows = 0;
  std::int64_t windowStride = 1;

  std::int64_t size() const { return tokens ? windows : labels.size(0); }

  // float [B, ...] = (augment(images[indices]) (/ 255 for uint8) - mean) / std, or the ids
  // as they are; and the labels. The augmentation is drawn from `augmentSeed` alone, so a
  // batch is reproducible.
  std::pair<at::Tensor, at::Tensor> batch(const std::vector<std::int64_t>& indices,
                                          std::uint64_t augmentSeed = 0) const;
  at::Tensor normalize(const at::Tensor& samples) const;
};

// What to load: a dataset's name (built-in, .npz or token file), its folder, and the
// options some kinds take.
struct DataSource {
  std::string name;
  std::string dir;                  // empty: the dataset's folder in dataRoot()
  std::int64_t syntheticSize = 6000;  // the synthetic datasets' training samples
  std::int64_t blockSize = 0;       // a token file's window
  std::int64_t ignoreIndex = -100;  // a label that marks a position without a target
  std::int64_t evalWindows = 0;     // a token file's test split: at most these windows (0: all)
};
DataSource sourceOf(const config::TrainConfig& cfg);

// The files `source` reads, both splits: a token file and its test split, an .npz file, or
// every regular file under a built-in dataset's folder (sorted; the folder itself when it
// is missing); none for the synthetic datasets. Throws ConfigError for an unknown name.
std::vector<std::string> filesOf(const DataSource& source);

// Loads `split` of a built-in dataset from its folder, of an .npz file (its arrays x_train,
// y_train, x_test, y_test; optional mean and std, per channel; optional classes, a scalar;
// optional ids, a scalar: uint8 x are token ids, not pixels; x of another integer type
// always are), or of a token file (the test split the file beside it, TokenFile.h). The synthetic datasets' test sets are a sixth of
// syntheticSize, at least 100. Throws DataError naming the file and what to do when files
// are missing or bad.
Dataset loadDataset(const DataSource& source, Split split);
inline Dataset loadDataset(const std::string& name, const std::string& dir, Split split, std::int64_t syntheticSize) {
  return loadDataset(DataSource{name, dir, syntheticSize}, split);
}

}  // namespace pstrain::data
