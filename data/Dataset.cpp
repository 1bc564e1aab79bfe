#include "data/Dataset.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdlib>
#include <random>

#include "data/Formats.h"
#include "runtime/Errors.h"

namespace pstrain::data {
namespace {

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

std::string dataRoot() {
  const char* root = std::getenv("PSTRAIN_DATA_DIR");
  return root && *root ? root : "/usr/share/datasets";
}

std::vector<DatasetInfo> datasetList() {
  const std::string root = dataRoot();
  return {
      {"fashion-mnist", "Fashion-MNIST, 60000/10000 grey images (IDX, gzipped or not)", {1, 28, 28}, 10,
       root + "/fashion-mnist", "idx", {0.2860}, {0.3530}},
      {"mnist", "MNIST digits, 60000/10000 grey images (IDX, gzipped or not)", {1, 28, 28}, 10, root + "/mnist", "idx",
       {0.1307}, {0.3081}},
      {"cifar10", "CIFAR-10, 50000/10000 colour images (binary version), crop+flip augmentation", {3, 32, 32}, 10,
       root + "/cifar-10-batches-bin", "cifar"},
      {"cifar100", "CIFAR-100 fine labels, 50000/10000 colour images (binary version), crop+flip", {3, 32, 32}, 100,
       root + "/cifar-100-binary", "cifar"},
      {"synthetic", "deterministic 10-class grey images, --synthetic-size training samples", {1, 28, 28}, 10, "",
       "synthetic", {0.5}, {0.3}},
      {"synthetic-cifar", "deterministic 10-class colour images, --synthetic-size samples, crop+flip", {3, 32, 32}, 10,
       "", "synthetic", {0.5, 0.5, 0.5}, {0.3, 0.3, 0.3}},
  };
}

const DatasetInfo* namedDataset(const std::string& name) {
  static const std::vector<DatasetInfo> list = datasetList();
  for (const DatasetInfo& info : list) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

DatasetInfo datasetInfo(const std::string& name, std::int64_t ignoreIndex) {
  DataSource source;
  source.name = name;
  source.ignoreIndex = ignoreIndex;
  return formatOf(name).info(source);
}

DataSource sourceOf(const config::TrainConfig& cfg) {
  DataSource source;
  source.name = cfg.dataset;
  source.dir = cfg.dataDir;
  source.syntheticSize = cfg.syntheticSize;
  source.blockSize = cfg.blockSize;
  source.ignoreIndex = cfg.ignoreIndex;
  return source;
}

std::vector<std::string> filesOf(const DataSource& source) { return formatOf(source.name).files(source); }

Dataset loadDataset(const DataSource& source, Split split) {
  Dataset d = formatOf(source.name).load(source, split);
  d.ignoreIndex = source.ignoreIndex;
  return d;
}

bool isTokenStream(const DataSource& source) { return formatOf(source.name).yields == Yields::TokenStream; }

at::Tensor TensorSamples::normalize(const at::Tensor& samples) const {
  if (ids) return samples;
  at::Tensor x = samples.scalar_type() == torch::kUInt8 ? samples.to(torch::kFloat32).div_(255.0)
                                                        : samples.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  if (mean.empty()) return x;
  // One value per channel (dimension 1), broadcast over the rest.
  std::vector<std::int64_t> shape(static_cast<std::size_t>(std::max<std::int64_t>(x.dim(), 2)), 1);
  shape[1] = -1;
  auto options = torch::TensorOptions().dtype(torch::kFloat32);
  auto m = torch::tensor(std::vector<float>(mean.begin(), mean.end()), options).view(shape);
  auto s = torch::tensor(std::vector<float>(std.begin(), std.end()), options).view(shape);
  if (x.dim() == 1) return x.sub_(m.flatten()).div_(s.flatten());
  return x.sub_(m).div_(s);
}

std::pair<at::Tensor, at::Tensor> TensorSamples::batch(const std::vector<std::int64_t>& indices,
                                                       std::uint64_t augmentSeed) const {
  const auto n = static_cast<std::int64_t>(indices.size());
  auto index = torch::from_blob(const_cast<std::int64_t*>(indices.data()), {n}, torch::kInt64);
  at::Tensor raw = images.index_select(0, index);
  if (augment) raw = cropAndFlip(raw, augmentSeed);
  return {normalize(raw), labels.index_select(0, index)};
}

}  // namespace pstrain::data
