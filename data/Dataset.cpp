#include "data/Dataset.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "data/Cifar.h"
#include "data/Idx.h"
#include "data/Npz.h"
#include "runtime/config/TrainConfig.h"
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

// The labels of `npz`'s array `name`: int64 class labels from int32 or int64, float32
// targets as they are.
at::Tensor npzLabels(const NpzFile& npz, const std::string& name) {
  const NpyArray h = npz.header(name);
  if (h.dtype != "i4" && h.dtype != "i8" && h.dtype != "f4") {
    throw DataError(fmt::format("{}: '{}' is {}; labels are int64 or int32 classes, or float32 targets for --loss mse",
                                npz.path(), name, h.dtype));
  }
  if (h.shape.empty()) throw DataError(fmt::format("{}: '{}' is a scalar, not one label per sample", npz.path(), name));
  const auto type = h.dtype == "i4" ? torch::kInt32 : h.dtype == "i8" ? torch::kInt64 : torch::kFloat32;
  at::Tensor y = torch::empty(h.shape, torch::TensorOptions().dtype(type));
  npz.read(name, [&](const NpyArray&) { return y.data_ptr(); });
  return h.dtype == "i4" ? y.to(torch::kInt64) : y;
}

// Classes of an .npz: its scalar 'classes' if any, else one more than the largest label of
// both splits (so pstrain and pseval agree); 0 for float targets. Labels out of range, or
// splits of different kinds, are DataErrors.
int npzClasses(const NpzFile& npz, const at::Tensor& train, const at::Tensor& test) {
  if (train.is_floating_point() != test.is_floating_point()) {
    throw DataError(fmt::format("{}: y_train and y_test must both be class labels or both float targets", npz.path()));
  }
  if (train.is_floating_point()) return 0;
  std::int64_t classes = 0;
  for (const at::Tensor& y : {train, test}) {
    if (y.numel() && y.min().item<std::int64_t>() < 0) {
      throw DataError(fmt::format("{}: a label is negative ({}); class labels are 0, 1, ...", npz.path(),
                                  y.min().item<std::int64_t>()));
    }
    if (y.numel()) classes = std::max(classes, y.max().item<std::int64_t>() + 1);
  }
  if (npz.has("classes")) {
    std::int64_t given = 0;
    const NpyArray h = npz.header("classes");
    if (!h.shape.empty() || (h.dtype != "i8" && h.dtype != "i4")) {
      throw DataError(fmt::format("{}: 'classes' must be one integer", npz.path()));
    }
    npz.read("classes", [&](const NpyArray&) { return static_cast<void*>(&given); });
    if (h.dtype == "i4") given = static_cast<std::int32_t>(given);
    if (given < classes) {
      throw DataError(fmt::format("{}: a label is {} but 'classes' says {}", npz.path(), classes - 1, given));
    }
    classes = given;
  }
  if (classes < 1 || classes > (1 << 20)) throw DataError(fmt::format("{}: {} classes", npz.path(), classes));
  return static_cast<int>(classes);
}

// Per-channel statistics: 'mean' and 'std' of float32 or float64, one per channel (x's
// dimension 1), or one for all.
std::vector<double> npzStatistic(const NpzFile& npz, const std::string& name, std::int64_t channels) {
  const NpyArray h = npz.header(name);
  if ((h.dtype != "f4" && h.dtype != "f8") || h.shape.size() > 1 ||
      (h.elements() != 1 && static_cast<std::int64_t>(h.elements()) != channels)) {
    throw DataError(fmt::format("{}: '{}' must hold {} float(s), one per channel (x's dimension 1)", npz.path(), name,
                                channels));
  }
  std::vector<double> values(h.elements());
  std::vector<float> single(h.elements());
  npz.read(name, [&](const NpyArray&) { return h.dtype == "f8" ? static_cast<void*>(values.data()) : single.data(); });
  if (h.dtype == "f4") values.assign(single.begin(), single.end());
  for (double v : values) {
    if (!std::isfinite(v) || (name == "std" && v <= 0)) throw DataError(fmt::format("{}: '{}' holds {}", npz.path(), name, v));
  }
  if (values.size() == 1) values.assign(static_cast<std::size_t>(channels), values[0]);
  return values;
}

Dataset loadNpzDataset(const std::string& path, Split split) {
  NpzFile npz(path);
  const std::string xName = split == Split::Train ? "x_train" : "x_test";
  const std::string yName = split == Split::Train ? "y_train" : "y_test";
  const NpyArray xh = npz.header(xName);
  if (xh.dtype != "u1" && xh.dtype != "f4") {
    throw DataError(fmt::format("{}: '{}' is {}; samples are uint8 (scaled by 1/255) or float32: convert with "
                                "x.astype(np.float32)", path, xName, xh.dtype));
  }
  if (xh.shape.empty() || xh.shape[0] == 0) throw DataError(fmt::format("{}: '{}' holds no samples", path, xName));
  at::Tensor trainLabels = npzLabels(npz, "y_train"), testLabels = npzLabels(npz, "y_test");
  Dataset d;
  d.name = path;
  d.classes = npzClasses(npz, trainLabels, testLabels);
  d.labels = split == Split::Train ? trainLabels : testLabels;
  if (d.labels.size(0) != xh.shape[0]) {
    throw DataError(fmt::format("{}: '{}' holds {} samples but '{}' {} labels", path, xName, xh.shape[0], yName,
                                d.labels.size(0)));
  }
  if (d.classes > 0 && d.labels.dim() != 1) {
    throw DataError(fmt::format("{}: '{}' must hold one class label per sample", path, yName));
  }
  d.images = torch::empty(xh.shape, torch::TensorOptions().dtype(xh.dtype == "u1" ? torch::kUInt8 : torch::kFloat32));
  npz.read(xName, [&](const NpyArray&) { return d.images.data_ptr(); });  // straight into the tensor
  if (xh.dtype == "f4") {
    const float* x = d.images.data_ptr<float>();
    for (std::int64_t i = 0, n = d.images.numel(); i < n; ++i) {
      if (!std::isfinite(x[i])) {
        throw DataError(fmt::format("{}: '{}' holds {} at element {} (sample {}); every value must be finite", path,
                                    xName, x[i], i, i / std::max<std::int64_t>(1, n / xh.shape[0])));
      }
    }
  }
  if (npz.has("mean") != npz.has("std")) throw DataError(fmt::format("{}: give both 'mean' and 'std', or neither", path));
  if (npz.has("mean")) {
    const std::int64_t channels = xh.shape.size() > 1 ? xh.shape[1] : 1;
    d.mean = npzStatistic(npz, "mean", channels);
    d.std = npzStatistic(npz, "std", channels);
  }
  d.fileIdentity = fmt::format("x_train crc32 {:08x}, y_train crc32 {:08x}", npz.checksum("x_train"),
                               npz.checksum("y_train"));
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

std::string dataRoot() {
  const char* root = std::getenv("PSTRAIN_DATA_DIR");
  return root && *root ? root : "/usr/share/datasets";
}

std::vector<DatasetInfo> datasetList() {
  const std::string root = dataRoot();
  return {
      {"fashion-mnist", "Fashion-MNIST, 60000/10000 grey images (IDX, gzipped or not)", {1, 28, 28}, 10,
       root + "/fashion-mnist"},
      {"mnist", "MNIST digits, 60000/10000 grey images (IDX, gzipped or not)", {1, 28, 28}, 10, root + "/mnist"},
      {"cifar10", "CIFAR-10, 50000/10000 colour images (binary version), crop+flip augmentation", {3, 32, 32}, 10,
       root + "/cifar-10-batches-bin"},
      {"cifar100", "CIFAR-100 fine labels, 50000/10000 colour images (binary version), crop+flip", {3, 32, 32}, 100,
       root + "/cifar-100-binary"},
      {"synthetic", "deterministic 10-class grey images, --synthetic-size training samples", {1, 28, 28}, 10, ""},
      {"synthetic-cifar", "deterministic 10-class colour images, --synthetic-size samples, crop+flip", {3, 32, 32}, 10, ""},
  };
}

DatasetInfo datasetInfo(const std::string& name) {
  if (config::isDatasetFile(name)) {
    NpzFile npz(name);
    const NpyArray x = npz.header("x_train");
    const int classes = npzClasses(npz, npzLabels(npz, "y_train"), npzLabels(npz, "y_test"));
    return {name, "NumPy .npz file", std::vector<std::int64_t>(x.shape.begin() + std::min<std::size_t>(1, x.shape.size()), x.shape.end()),
            classes, ""};
  }
  static const std::vector<DatasetInfo> list = datasetList();
  std::string known;
  for (const auto& info : list) {
    if (info.name == name) return info;
    known += (known.empty() ? "" : ", ") + info.name;
  }
  throw ConfigError(fmt::format("unknown dataset '{}' (known: {}; or an .npz file)", name, known));
}

Dataset loadDataset(const std::string& name, const std::string& dir, Split split,
                    std::int64_t syntheticSize) {
  if (config::isDatasetFile(name)) return loadNpzDataset(name, split);
  const DatasetInfo info = datasetInfo(name);
  const std::string where = dir.empty() ? info.defaultDir : dir;
  if (name == "fashion-mnist") return loadIdxDataset(name, where, split, {0.2860}, {0.3530});
  if (name == "mnist") return loadIdxDataset(name, where, split, {0.1307}, {0.3081});
  if (name == "cifar10") return loadCifarDataset(name, where, split, 10);
  if (name == "cifar100") return loadCifarDataset(name, where, split, 100);
  return syntheticDataset(info, split, syntheticSize);
}

at::Tensor Dataset::normalize(const at::Tensor& samples) const {
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

std::pair<at::Tensor, at::Tensor> Dataset::batch(const std::vector<std::int64_t>& indices,
                                                 std::uint64_t augmentSeed) const {
  auto index = torch::from_blob(const_cast<std::int64_t*>(indices.data()),
                                {static_cast<std::int64_t>(indices.size())}, torch::kInt64);
  at::Tensor raw = images.index_select(0, index);
  if (augment) raw = cropAndFlip(raw, augmentSeed);
  return {normalize(raw), labels.index_select(0, index)};
}

}  // namespace pstrain::data
