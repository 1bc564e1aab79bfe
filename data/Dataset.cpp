#include "data/Dataset.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <random>

#include "data/Idx.h"
#include "runtime/Errors.h"

namespace pstrain::data {
namespace {

namespace fs = std::filesystem;

// The first of "<stem>.gz" and "<stem>" that exists; throws DataError otherwise.
std::string findFile(const std::string& dir, const std::string& stem, const std::string& dataset) {
  for (const std::string& candidate : {stem + ".gz", stem}) {
    fs::path path = fs::path(dir) / candidate;
    if (fs::exists(path)) return path.string();
  }
  throw DataError(fmt::format(
      "{}/{}{{.gz,}}: not found. Put the {} IDX files in {} or pass --data-dir (see tools/get-data)",
      dir, stem, dataset, dir));
}

Dataset loadIdxDataset(const std::string& name, const std::string& dir, Split split,
                       std::vector<double> mean, std::vector<double> std) {
  std::string prefix = split == Split::Train ? "train" : "t10k";
  std::string imagePath = findFile(dir, prefix + "-images-idx3-ubyte", name);
  std::string labelPath = findFile(dir, prefix + "-labels-idx1-ubyte", name);
  IdxArray images = readIdx(imagePath, 3);
  IdxArray labels = readIdx(labelPath, 1);
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(fmt::format("{} holds {} images but {} holds {} labels", imagePath,
                                images.dims[0], labelPath, labels.dims[0]));
  }
  if (images.dims[1] != 28 || images.dims[2] != 28) {
    throw DataError(fmt::format("{}: images are {}x{}, expected 28x28", imagePath, images.dims[1],
                                images.dims[2]));
  }
  for (std::size_t i = 0; i < labels.bytes.size(); ++i) {
    if (labels.bytes[i] >= 10) {
      throw DataError(fmt::format("{}: label {} of sample {} is not in 0..9", labelPath,
                                  labels.bytes[i], i));
    }
  }
  Dataset d;
  d.name = name;
  std::int64_t n = images.dims[0];
  d.images = torch::from_blob(images.bytes.data(), {n, 1, 28, 28}, torch::kUInt8).clone();
  d.labels = torch::from_blob(labels.bytes.data(), {n}, torch::kUInt8).to(torch::kInt64);
  d.mean = std::move(mean);
  d.std = std::move(std);
  return d;
}

// Ten classes, each a fixed random 28x28 template; a sample is its class template plus
// uniform noise. Identical on every machine (own integer generator), learnable in a few
// hundred steps, and hard enough that accuracy is not trivially 100%.
Dataset syntheticDataset(Split split, std::int64_t trainSize) {
  std::int64_t n = split == Split::Train ? trainSize : std::max<std::int64_t>(100, trainSize / 6);
  std::mt19937_64 templateGen(20240601);
  std::vector<std::uint8_t> templates(10 * 784);
  for (auto& t : templates) t = static_cast<std::uint8_t>(templateGen() % 256);
  std::mt19937_64 gen(split == Split::Train ? 1 : 2);
  Dataset d;
  d.name = "synthetic";
  d.images = torch::empty({n, 1, 28, 28}, torch::kUInt8);
  d.labels = torch::empty({n}, torch::kInt64);
  auto* pixels = d.images.data_ptr<std::uint8_t>();
  auto* labels = d.labels.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    int label = static_cast<int>(gen() % 10);
    labels[i] = label;
    for (int p = 0; p < 784; ++p) {
      int noise = static_cast<int>(gen() % 385) - 192;
      int value = templates[label * 784 + p] / 2 + 64 + noise;
      pixels[i * 784 + p] = static_cast<std::uint8_t>(std::clamp(value, 0, 255));
    }
  }
  d.mean = {0.5};
  d.std = {0.3};
  return d;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> datasetList() {
  return {
      {"fashion-mnist", "Fashion-MNIST, 60000/10000 28x28 grey images, 10 classes (IDX, gzipped or not)"},
      {"mnist", "MNIST digits, 60000/10000 28x28 grey images, 10 classes (IDX, gzipped or not)"},
      {"synthetic", "deterministic 10-class 28x28 images, --synthetic-size training samples"},
  };
}

std::string defaultDataDir(const std::string& name) {
  if (name == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  if (name == "mnist") return "/usr/share/datasets/mnist";
  return "";
}

Dataset loadDataset(const std::string& name, const std::string& dir, Split split,
                    std::int64_t syntheticSize) {
  std::string where = dir.empty() ? defaultDataDir(name) : dir;
  if (name == "fashion-mnist") return loadIdxDataset(name, where, split, {0.2860}, {0.3530});
  if (name == "mnist") return loadIdxDataset(name, where, split, {0.1307}, {0.3081});
  if (name == "synthetic") return syntheticDataset(split, syntheticSize);
  throw ConfigError(fmt::format("unknown dataset '{}' (try --list-datasets)", name));
}

at::Tensor Dataset::normalize(const at::Tensor& uint8Images) const {
  auto x = uint8Images.to(torch::kFloat32).div_(255.0);
  auto options = torch::TensorOptions().dtype(torch::kFloat32);
  auto m = torch::tensor(std::vector<float>(mean.begin(), mean.end()), options).view({1, -1, 1, 1});
  auto s = torch::tensor(std::vector<float>(std.begin(), std.end()), options).view({1, -1, 1, 1});
  return x.sub_(m).div_(s);
}

std::pair<at::Tensor, at::Tensor> Dataset::batch(const std::vector<std::int64_t>& indices) const {
  auto index = torch::from_blob(const_cast<std::int64_t*>(indices.data()),
                                {static_cast<std::int64_t>(indices.size())}, torch::kInt64);
  return {normalize(images.index_select(0, index)), labels.index_select(0, index)};
}

}  // namespace pstrain::data
