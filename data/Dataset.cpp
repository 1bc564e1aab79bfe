#include "data/Dataset.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <random>

#include "data/Cifar.h"
#include "data/Idx.h"
#include "runtime/Errors.h"

namespace pstrain::data {
namespace {

namespace fs = std::filesystem;

const std::vector<double> kCifarMean = {0.4914, 0.4822, 0.4465};
const std::vector<double> kCifarStd = {0.2470, 0.2435, 0.2616};

// The first of "<stem>.gz" and "<stem>" that exists; throws DataError otherwise.
std::string findIdxFile(const std::string& dir, const std::string& stem, const std::string& dataset) {
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
  std::string imagePath = findIdxFile(dir, prefix + "-images-idx3-ubyte", name);
  std::string labelPath = findIdxFile(dir, prefix + "-labels-idx1-ubyte", name);
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

Dataset loadCifarDataset(const std::string& name, const std::string& dir, Split split, int classes) {
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
    fs::path path = fs::path(dir) / file;
    if (!fs::exists(path)) {
      throw DataError(fmt::format("{}: not found. Point --data-dir at the extracted {} binary folder "
                                  "(cifar-{}-{}-bin; see tools/get-data)",
                                  path.string(), name, classes, classes == 10 ? "batches" : "binary"));
    }
    paths.push_back(path.string());
  }
  CifarArrays arrays = readCifar(paths, classes);
  const auto n = static_cast<std::int64_t>(arrays.labels.size());
  Dataset d;
  d.name = name;
  d.classes = classes;
  d.images = torch::from_blob(arrays.pixels.data(), {n, 3, 32, 32}, torch::kUInt8).clone();
  d.labels = torch::from_blob(arrays.labels.data(), {n}, torch::kUInt8).to(torch::kInt64);
  d.mean = kCifarMean;
  d.std = kCifarStd;
  d.augment = split == Split::Train;
  return d;
}

// Ten classes, each a fixed random template; a sample is its class template plus uniform
// noise. Identical on every machine (own integer generator), learnable in a few hundred
// steps, and hard enough that accuracy is not trivially 100%.
Dataset syntheticDataset(const DatasetInfo& info, Split split, std::int64_t trainSize) {
  const std::int64_t n = split == Split::Train ? trainSize : std::max<std::int64_t>(100, trainSize / 6);
  const std::int64_t pixels = info.shape[0] * info.shape[1] * info.shape[2];
  std::mt19937_64 templateGen(20240601);
  std::vector<std::uint8_t> templates(10 * pixels);
  for (auto& t : templates) t = static_cast<std::uint8_t>(templateGen() % 256);
  std::mt19937_64 gen(split == Split::Train ? 1 : 2);
  Dataset d;
  d.name = info.name;
  d.images = torch::empty({n, info.shape[0], info.shape[1], info.shape[2]}, torch::kUInt8);
  d.labels = torch::empty({n}, torch::kInt64);
  auto* out = d.images.data_ptr<std::uint8_t>();
  auto* labels = d.labels.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    int label = static_cast<int>(gen() % 10);
    labels[i] = label;
    for (std::int64_t p = 0; p < pixels; ++p) {
      int noise = static_cast<int>(gen() % 385) - 192;
      int value = templates[label * pixels + p] / 2 + 64 + noise;
      out[i * pixels + p] = static_cast<std::uint8_t>(std::clamp(value, 0, 255));
    }
  }
  d.mean = std::vector<double>(info.shape[0], 0.5);
  d.std = std::vector<double>(info.shape[0], 0.3);
  d.augment = info.shape[0] == 3 && split == Split::Train;
  return d;
}

// Random crop of the zero-padded (4 pixels) image back to its size, then a horizontal flip
// with probability 1/2, per sample.
at::Tensor cropAndFlip(const at::Tensor& images, std::uint64_t seed) {
  const std::int64_t h = images.size(2), w = images.size(3);
  at::Tensor padded = torch::constant_pad_nd(images, {4, 4, 4, 4});
  at::Tensor out = torch::empty_like(images);
  std::mt19937_64 gen(seed);
  for (std::int64_t i = 0; i < images.size(0); ++i) {
    const std::uint64_t r = gen();
    const std::int64_t dy = static_cast<std::int64_t>(r % 9), dx = static_cast<std::int64_t>((r / 9) % 9);
    at::Tensor crop = padded[i].narrow(1, dy, h).narrow(2, dx, w);
    out[i].copy_((r / 81) % 2 ? crop.flip({2}) : crop);
  }
  return out;
}

}  // namespace

std::vector<DatasetInfo> datasetList() {
  return {
      {"fashion-mnist", "Fashion-MNIST, 60000/10000 grey images (IDX, gzipped or not)", {1, 28, 28}, 10,
       "/usr/share/datasets/fashion-mnist"},
      {"mnist", "MNIST digits, 60000/10000 grey images (IDX, gzipped or not)", {1, 28, 28}, 10,
       "/usr/share/datasets/mnist"},
      {"cifar10", "CIFAR-10, 50000/10000 colour images (binary version), crop+flip augmentation", {3, 32, 32}, 10,
       "/usr/share/datasets/cifar-10-batches-bin"},
      {"cifar100", "CIFAR-100 fine labels, 50000/10000 colour images (binary version), crop+flip", {3, 32, 32}, 100,
       "/usr/share/datasets/cifar-100-binary"},
      {"synthetic", "deterministic 10-class grey images, --synthetic-size training samples", {1, 28, 28}, 10, ""},
      {"synthetic-cifar", "deterministic 10-class colour images, --synthetic-size samples, crop+flip", {3, 32, 32}, 10, ""},
  };
}

const DatasetInfo& datasetInfo(const std::string& name) {
  static const std::vector<DatasetInfo> list = datasetList();
  std::string known;
  for (const auto& info : list) {
    if (info.name == name) return info;
    known += (known.empty() ? "" : ", ") + info.name;
  }
  throw ConfigError(fmt::format("unknown dataset '{}' (known: {})", name, known));
}

Dataset loadDataset(const std::string& name, const std::string& dir, Split split,
                    std::int64_t syntheticSize) {
  const DatasetInfo& info = datasetInfo(name);
  const std::string where = dir.empty() ? info.defaultDir : dir;
  if (name == "fashion-mnist") return loadIdxDataset(name, where, split, {0.2860}, {0.3530});
  if (name == "mnist") return loadIdxDataset(name, where, split, {0.1307}, {0.3081});
  if (name == "cifar10") return loadCifarDataset(name, where, split, 10);
  if (name == "cifar100") return loadCifarDataset(name, where, split, 100);
  return syntheticDataset(info, split, syntheticSize);
}

at::Tensor Dataset::normalize(const at::Tensor& uint8Images) const {
  auto x = uint8Images.to(torch::kFloat32).div_(255.0);
  auto options = torch::TensorOptions().dtype(torch::kFloat32);
  auto m = torch::tensor(std::vector<float>(mean.begin(), mean.end()), options).view({1, -1, 1, 1});
  auto s = torch::tensor(std::vector<float>(std.begin(), std.end()), options).view({1, -1, 1, 1});
  return x.sub_(m).div_(s);
}

std::pair<at::Tensor, at::Tensor> Dataset::batch(const std::vector<std::int64_t>& indices,
                                                 std::uint64_t augmentSeed) const {
  auto index = torch::from_blob(const_cast<std::int64_t*>(indices.data()),
                                {static_cast<std::int64_t>(indices.size())}, torch::kInt64);
  at::Tensor raw = images.index_select(0, index);
  if (augment) raw = cropAndFlip(raw, augmentSeed);
  return {normalize(raw), labels.index_select(0, index)};
}

}  // namespace pstrain::data
