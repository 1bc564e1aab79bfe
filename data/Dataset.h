#pragma once
// A dataset: a split's samples, which its format's reader made (Formats.h: one row per format,
// a built-in name or a file or folder of the user's), and what the rest of pstrain needs to
// know of them: their classes (0: float targets), whether they are token ids and the largest,
// and an identity that ranks compare. Dataset asks the samples for batches, never what they are.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/TrainConfig.h"

namespace pstrain::data {

enum class Split { Train, Test };

struct DatasetInfo {
  std::string name;
  std::string description;
  std::vector<std::int64_t> shape;  // of one sample: C, H, W for images
  int classes;             // 0: regression (float targets)
  std::string defaultDir;  // where it is looked for without --data-dir (in dataRoot(); "": needs no files)
  std::string format;      // the row of Formats.h that reads it
  std::vector<double> mean = {}, std = {};  // a built-in dataset's per-channel normalisation
};

// Where the built-in datasets' folders are: $PSTRAIN_DATA_DIR, else /usr/share/datasets
// (Debian's dataset packages).
std::string dataRoot();

// The built-in datasets (names), in --list-datasets' order.
std::vector<DatasetInfo> datasetList();
// The built-in dataset called `name`, or null.
const DatasetInfo* namedDataset(const std::string& name);

// A built-in dataset's, or that of a file or folder of the user's, read from its headers and
// labels (a label equal to `ignoreIndex` is no class). Throws ConfigError for a name or path
// that no format reads (listing the names and the formats), or for a token file (whose
// vocabulary is known once it is read: loadDataset), or DataError naming the file and what
// is wrong with it.
DatasetInfo datasetInfo(const std::string& name, std::int64_t ignoreIndex = -100);

// A split's samples, as a format's reader holds them.
class Samples {
 public:
  virtual ~Samples() = default;
  virtual std::int64_t size() const = 0;
  // The inputs (float [B, ...], or int64 token ids) and targets of samples `indices`; any
  // augmentation is drawn from `augmentSeed` alone, so that a batch is reproducible.
  virtual std::pair<at::Tensor, at::Tensor> batch(const std::vector<std::int64_t>& indices,
                                                  std::uint64_t augmentSeed) const = 0;
};

// Samples held in memory: raw uint8 images (scaled by 1/255), any float32 array or int64
// token ids, with int64 class labels (one per sample or per position) or float32 targets;
// the per-channel normalisation applied when a batch is taken and, for CIFAR training sets,
// random-crop (4-pixel zero padding) and horizontal-flip augmentation.
struct TensorSamples : Samples {
  at::Tensor images;         // [N, ...]
  at::Tensor labels;         // [N] or [N, L] int64, or float32 [N, ...]
  std::vector<double> mean;  // per channel (dim 1), of pixel / 255 or of the float value
  std::vector<double> std;
  bool augment = false;      // random crop + flip in batch()
  bool ids = false;          // token ids: never scaled or normalised

  std::int64_t size() const override { return labels.size(0); }
  // float [B, ...] = (augment(images[indices]) (/ 255 for uint8) - mean) / std, or the ids as
  // they are; and the labels.
  std::pair<at::Tensor, at::Tensor> batch(const std::vector<std::int64_t>& indices,
                                          std::uint64_t augmentSeed) const override;
  at::Tensor normalize(const at::Tensor& samples) const;
};

struct Dataset {
  std::string name;
  std::shared_ptr<const Samples> samples;
  int classes = 10;                 // 0: regression
  std::int64_t ignoreIndex = -100;  // a label of this value is no target (DataSource)
  bool ids = false;                 // the samples are token ids: int64
  std::int64_t maxId = -1;          // with ids: the largest, which the model's vocabulary must take
  std::string fileIdentity;         // a file's (.npz: its arrays' CRC-32s), compared across ranks
  std::string storedIds;            // a token file's id type on disk ("uint16"), else ""

  std::int64_t size() const { return samples->size(); }
  std::pair<at::Tensor, at::Tensor> batch(const std::vector<std::int64_t>& indices, std::uint64_t augmentSeed = 0) const {
    return samples->batch(indices, augmentSeed);
  }
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
// every regular file under a dataset's folder (sorted; the folder itself when it is missing);
// none for the synthetic datasets. Throws ConfigError for a name or path no format reads.
std::vector<std::string> filesOf(const DataSource& source);

// Loads `split` of `source` with its format's reader (Formats.h says what each reads).
// Throws DataError naming the file and what to do when files are missing or bad.
Dataset loadDataset(const DataSource& source, Split split);
inline Dataset loadDataset(const std::string& name, const std::string& dir, Split split, std::int64_t syntheticSize) {
  return loadDataset(DataSource{name, dir, syntheticSize}, split);
}

// Whether `source` is a token stream (a token file: Formats.h's token row).
bool isTokenStream(const DataSource& source);

}  // namespace pstrain::data
