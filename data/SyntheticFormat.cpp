// The format row "synthetic" (Formats.h): the synthetic datasets, drawn alike on every machine.
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

#include "data/FormatParts.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::data {
namespace {

namespace fs = std::filesystem;

DatasetInfo syntheticInfo(const DataSource& source) { return *namedDataset(source.name); }

// Ten classes, each a fixed random template; a sample is its class template plus uniform
// noise. Identical on every machine (own integer generator), learnable in a few hundred
// steps, and hard enough that accuracy is not trivially 100%. The test set is a sixth of
// the training set, at least 100.
Dataset loadSynthetic(const DataSource& source, Split split) {
  const DatasetInfo& info = *namedDataset(source.name);
  const std::int64_t n =
      split == Split::Train ? source.syntheticSize : std::max<std::int64_t>(100, source.syntheticSize / 6);
  const std::int64_t pixels = info.shape[0] * info.shape[1] * info.shape[2];
  std::mt19937_64 templateGen(20240601);
  std::vector<std::uint8_t> templates(static_cast<std::size_t>(10 * pixels));
  for (auto& t : templates) t = static_cast<std::uint8_t>(templateGen() % 256);
  std::mt19937_64 gen(split == Split::Train ? 1 : 2);
  auto samples = std::make_shared<TensorSamples>();
  samples->images = torch::empty({n, info.shape[0], info.shape[1], info.shape[2]}, torch::kUInt8);
  samples->labels = torch::empty({n}, torch::kInt64);
  auto* out = samples->images.data_ptr<std::uint8_t>();
  auto* labels = samples->labels.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(gen() % 10);
    labels[i] = label;
    for (std::int64_t p = 0; p < pixels; ++p) {
      const int noise = static_cast<int>(gen() % 385) - 192;
      const int value = templates[static_cast<std::size_t>(label * pixels + p)] / 2 + 64 + noise;
      out[i * pixels + p] = static_cast<std::uint8_t>(std::clamp(value, 0, 255));
    }
  }
  samples->mean = info.mean;
  samples->std = info.std;
  samples->augment = info.shape[0] == 3 && split == Split::Train;
  Dataset d;
  d.name = info.name;
  d.classes = info.classes;
  d.samples = std::move(samples);
  return d;
}

std::vector<std::string> noFiles(const DataSource&) { return {}; }

}  // namespace

const FormatRow kSyntheticFormat = {"synthetic",
    "",
    Yields::Labelled, nullptr, syntheticInfo, loadSynthetic, noFiles};

}  // namespace pstrain::data
