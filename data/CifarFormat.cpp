// The format row "cifar" (Formats.h): CIFAR binary folders (CIFAR-10, CIFAR-100): Cifar.h parses them.
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

#include "data/Cifar.h"
#include "data/FormatParts.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::data {
namespace {

namespace fs = std::filesystem;

const std::vector<double> kCifarMean = {0.4914, 0.4822, 0.4465};
const std::vector<double> kCifarStd = {0.2470, 0.2435, 0.2616};

// CIFAR-10's folder holds data_batch_1..5.bin and test_batch.bin; CIFAR-100's train.bin and
// test.bin (a token folder holds train.bin and val.bin).
int cifarClassesOfFolder(const std::string& dir) {
  if (isThere(fs::path(dir) / "data_batch_1.bin")) return 10;
  if (isThere(fs::path(dir) / "train.bin") && isThere(fs::path(dir) / "test.bin")) return 100;
  return 0;
}

bool isCifarFolder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && cifarClassesOfFolder(path) > 0;
}

int cifarClasses(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return named->classes;
  return cifarClassesOfFolder(source.name);
}

DatasetInfo cifarInfo(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return *named;
  const int classes = cifarClasses(source);
  return {source.name, fmt::format("a CIFAR-{} binary folder", classes), {3, 32, 32}, classes, "", "cifar"};
}

Dataset loadCifar(const DataSource& source, Split split) {
  const int classes = cifarClasses(source);
  const std::string dir = folderOf(source);
  std::vector<std::string> names;
  if (classes == 10) {
    if (split == Split::Train) {
      for (int i = 1; i <= 5; ++i) names.push_back(fmt::format("data_batch_{}.bin", i));
    } else {
      names.push_back("test_batch.bin");
    }
  } else {
    names.push_back(split == Split::Train ? "train.bin" : "test.bin");
  }
  std::vector<std::string> paths;
  for (const auto& file : names) {
    const fs::path path = fs::path(dir) / file;
    if (!isThere(path)) {
      throw DataError(fmt::format("{}: not found. Point --data-dir at the extracted {} binary folder "
                                  "(cifar-{}-{}-bin; see tools/get-data)",
                                  path.string(), source.name, classes, classes == 10 ? "batches" : "binary"));
    }
    paths.push_back(path.string());
  }
  CifarArrays arrays = readCifar(paths, classes);
  const auto n = static_cast<std::int64_t>(arrays.labels.size());
  auto samples = std::make_shared<TensorSamples>();
  samples->images = torch::from_blob(arrays.pixels.data(), {n, 3, 32, 32}, torch::kUInt8).clone();
  samples->labels = torch::from_blob(arrays.labels.data(), {n}, torch::kUInt8).to(torch::kInt64);
  samples->mean = kCifarMean;
  samples->std = kCifarStd;
  samples->augment = split == Split::Train;
  Dataset d;
  d.name = source.name;
  d.classes = classes;
  d.samples = std::move(samples);
  return d;
}

}  // namespace

const FormatRow kCifarFormat = {"cifar",
    "a CIFAR binary folder (CIFAR-10's data_batch_1..5.bin, test_batch.bin; CIFAR-100's train.bin, test.bin)",
    Yields::Labelled, isCifarFolder, cifarInfo, loadCifar, filesUnder};

}  // namespace pstrain::data
