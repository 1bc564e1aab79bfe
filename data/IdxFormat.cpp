// The format row "idx" (Formats.h): IDX files (MNIST, Fashion-MNIST, or a folder of them): Idx.h parses them.
#include "data/Formats.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>

#include "data/Idx.h"
#include "data/FormatParts.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::data {
namespace {

namespace fs = std::filesystem;

// The first of "<stem>.gz" and "<stem>" that exists in `dir`, or "".
std::string idxFile(const std::string& dir, const std::string& stem) {
  for (const std::string& candidate : {stem + ".gz", stem}) {
    if (isThere(fs::path(dir) / candidate)) return (fs::path(dir) / candidate).string();
  }
  return "";
}

bool isIdxFolder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && !idxFile(path, "train-images-idx3-ubyte").empty();
}

std::string idxPrefix(Split split) { return split == Split::Train ? "train" : "t10k"; }

std::string requireIdxFile(const DataSource& source, const std::string& stem) {
  const std::string dir = folderOf(source), path = idxFile(dir, stem);
  if (path.empty()) {
    throw DataError(fmt::format("{}/{}{{.gz,}}: not found. Put the {} IDX files in {} or pass --data-dir (see "
                                "tools/get-data)", dir, stem, source.name, dir));
  }
  return path;
}

IdxArray idxLabels(const DataSource& source, Split split) {
  return readIdx(requireIdxFile(source, idxPrefix(split) + "-labels-idx1-ubyte"), 1);
}

// A folder of the user's: one more class than the largest label of either split (so that
// pstrain and pseval agree); a built-in dataset: its own.
int idxClasses(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return named->classes;
  int classes = 0;
  for (Split split : {Split::Train, Split::Test}) {
    const IdxArray labels = idxLabels(source, split);
    for (std::uint8_t label : labels.bytes) classes = std::max(classes, label + 1);
  }
  return std::max(classes, 1);
}

// Mean and standard deviation of a folder's training images (pixel / 255): both splits are
// normalised with the training split's.
std::pair<std::vector<double>, std::vector<double>> idxStatistics(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return {named->mean, named->std};
  const IdxArray images = readIdx(requireIdxFile(source, "train-images-idx3-ubyte"), 3);
  double sum = 0, squares = 0;
  for (std::uint8_t b : images.bytes) sum += b, squares += static_cast<double>(b) * b;
  const double n = std::max<double>(1, static_cast<double>(images.bytes.size()));
  const double mean = sum / n / 255, variance = squares / n / (255.0 * 255.0) - mean * mean;
  return {{mean}, {std::max(std::sqrt(std::max(variance, 0.0)), 1e-3)}};
}

DatasetInfo idxInfo(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return *named;
  const IdxArray images = readIdx(requireIdxFile(source, "train-images-idx3-ubyte"), 3);
  return {source.name, "a folder of IDX files", {1, images.dims[1], images.dims[2]}, idxClasses(source), "", "idx"};
}

Dataset loadIdx(const DataSource& source, Split split) {
  const std::string imagePath = requireIdxFile(source, idxPrefix(split) + "-images-idx3-ubyte");
  const std::string labelPath = requireIdxFile(source, idxPrefix(split) + "-labels-idx1-ubyte");
  IdxArray images = readIdx(imagePath, 3);
  IdxArray labels = readIdx(labelPath, 1);
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(fmt::format("{} holds {} images but {} holds {} labels", imagePath, images.dims[0], labelPath,
                                labels.dims[0]));
  }
  const DatasetInfo info = idxInfo(source);
  if (images.dims[1] != info.shape[1] || images.dims[2] != info.shape[2]) {
    throw DataError(fmt::format("{}: images are {}x{}, expected {}x{}", imagePath, images.dims[1], images.dims[2],
                                info.shape[1], info.shape[2]));
  }
  for (std::size_t i = 0; i < labels.bytes.size(); ++i) {
    if (labels.bytes[i] >= info.classes) {
      throw DataError(fmt::format("{}: label {} of sample {} is not in 0..{}", labelPath, labels.bytes[i], i,
                                  info.classes - 1));
    }
  }
  auto samples = std::make_shared<TensorSamples>();
  const std::int64_t n = images.dims[0];
  samples->images = torch::from_blob(images.bytes.data(), {n, 1, images.dims[1], images.dims[2]}, torch::kUInt8).clone();
  samples->labels = torch::from_blob(labels.bytes.data(), {n}, torch::kUInt8).to(torch::kInt64);
  std::tie(samples->mean, samples->std) = idxStatistics(source);
  Dataset d;
  d.name = source.name;
  d.classes = info.classes;
  d.samples = std::move(samples);
  return d;
}

}  // namespace

const FormatRow kIdxFormat = {"idx",
    "a folder of IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-..., gzipped or not)",
    Yields::Labelled, isIdxFolder, idxInfo, loadIdx, filesUnder};

}  // namespace pstrain::data
