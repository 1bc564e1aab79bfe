#include "data/Dataset.h"
#include "data/MemoryBound.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <limits>
#include <random>

#include "data/Cifar.h"
#include "data/Idx.h"
#include "data/Npz.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"

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

bool isIntegerDtype(const std::string& dtype) {
  return dtype == "u1" || dtype == "i2" || dtype == "u2" || dtype == "i4" || dtype == "i8";
}

// Array `name` of `npz` as a tensor of its own type (numpy's u1, i2, i4, i8, f4), or as
// int64 (uint16 has no torch type of its own in 1.13).
at::Tensor npzTensor(const NpzFile& npz, const std::string& name, const NpyArray& h) {
  static const std::map<std::string, c10::ScalarType> types = {
      {"u1", torch::kUInt8}, {"i2", torch::kInt16}, {"u2", torch::kInt16}, {"i4", torch::kInt32},
      {"i8", torch::kInt64}, {"f4", torch::kFloat32}, {"f8", torch::kFloat64}};
  at::Tensor t = torch::empty(h.shape, torch::TensorOptions().dtype(types.at(h.dtype)));
  npz.read(name, [&](const NpyArray&) { return t.data_ptr(); });  // straight into the tensor
  if (h.dtype == "u2") return t.to(torch::kInt64).bitwise_and_(0xffff);
  return t;
}

// The labels of `npz`'s array `name`: int64 class labels ([N], or [N, L]: one per position)
// from any integer type, float32 targets as they are.
at::Tensor npzLabels(const NpzFile& npz, const std::string& name) {
  const NpyArray h = npz.header(name);
  if (!isIntegerDtype(h.dtype) && h.dtype != "f4") {
    throw DataError(fmt::format("{}: '{}' is {}; labels are integer classes (uint8, int16, uint16, int32, int64), "
                                "or float32 targets for --loss mse", npz.path(), name, h.dtype));
  }
  if (h.shape.empty()) throw DataError(fmt::format("{}: '{}' is a scalar, not one label per sample", npz.path(), name));
  at::Tensor y = npzTensor(npz, name, h);
  return h.dtype == "f4" ? y : y.to(torch::kInt64);
}

// One integer scalar of `npz` (a flag or a count), or `otherwise` without it.
std::int64_t npzScalar(const NpzFile& npz, const std::string& name, std::int64_t otherwise) {
  if (!npz.has(name)) return otherwise;
  const NpyArray h = npz.header(name);
  if (!h.shape.empty() || !isIntegerDtype(h.dtype)) {
    throw DataError(fmt::format("{}: '{}' must be one integer (np.savez(..., {}=N))", npz.path(), name, name));
  }
  return npzTensor(npz, name, h).to(torch::kInt64).item<std::int64_t>();
}

// Classes of an .npz: its scalar 'classes' if any, else one more than the largest label of
// both splits (so pstrain and pseval agree); 0 for float targets. A label is in [0,
// classes) or `ignoreIndex`; labels out of range, or splits of different kinds, are
// DataErrors.
int npzClasses(const NpzFile& npz, const at::Tensor& train, const at::Tensor& test, std::int64_t ignoreIndex) {
  if (train.is_floating_point() != test.is_floating_point()) {
    throw DataError(fmt::format("{}: y_train and y_test must both be class labels or both float targets", npz.path()));
  }
  if (train.is_floating_point()) return 0;
  std::int64_t classes = 0;
  for (const at::Tensor& y : {train, test}) {
    const at::Tensor counted = y.masked_select(y.ne(ignoreIndex));
    if (counted.numel() && counted.min().item<std::int64_t>() < 0) {
      throw DataError(fmt::format("{}: a label is negative ({}); class labels are 0, 1, ... (or the --ignore-index, "
                                  "{})", npz.path(), counted.min().item<std::int64_t>(), ignoreIndex));
    }
    if (counted.numel()) classes = std::max(classes, counted.max().item<std::int64_t>() + 1);
  }
  const std::int64_t given = npzScalar(npz, "classes", 0);
  if (npz.has("classes")) {
    if (given < classes) {
      throw DataError(fmt::format("{}: a label is {} but 'classes' says {}", npz.path(), classes - 1, given));
    }
    classes = given;
  }
  if (classes < 1 || classes > (1 << 24)) throw DataError(fmt::format("{}: {} classes", npz.path(), classes));
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
  const at::Tensor t = npzTensor(npz, name, h).to(torch::kFloat64).contiguous();
  std::vector<double> values(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  for (double v : values) {
    if (!std::isfinite(v) || (name == "std" && v <= 0)) throw DataError(fmt::format("{}: '{}' holds {}", npz.path(), name, v));
  }
  if (values.size() == 1) values.assign(static_cast<std::size_t>(channels), values[0]);
  return values;
}

// Whether x of `npz` holds token ids: an integer type other than uint8, or uint8 with the
// scalar 'ids' set (np.savez(..., ids=1)); else they are pixels (uint8) or float32 values.
bool npzHoldsIds(const NpzFile& npz, const std::string& name, const NpyArray& x) {
  if (!isIntegerDtype(x.dtype) && x.dtype != "f4") {
    throw DataError(fmt::format("{}: '{}' is {}; samples are uint8 (pixels, scaled by 1/255), float32, or integer "
                                "token ids (int16, uint16, int32, int64; uint8 with ids=1): convert with "
                                "x.astype(np.float32) or x.astype(np.int64)", npz.path(), name, x.dtype));
  }
  const bool ids = npzScalar(npz, "ids", 0) != 0;
  if (ids && !isIntegerDtype(x.dtype)) throw DataError(fmt::format("{}: 'ids' is set but x is {}, not integers", npz.path(), x.dtype));
  return ids || (isIntegerDtype(x.dtype) && x.dtype != "u1");
}

Dataset loadNpzDataset(const DataSource& source, Split split) {
  const std::string& path = source.name;
  NpzFile npz(path);
  const std::string xName = split == Split::Train ? "x_train" : "x_test";
  const std::string yName = split == Split::Train ? "y_train" : "y_test";
  const NpyArray xh = npz.header(xName);
  if (xh.shape.empty() || xh.shape[0] == 0) throw DataError(fmt::format("{}: '{}' holds no samples", path, xName));
  if (xh.elements() == 0) {
    throw DataError(fmt::format("{}: '{}' has shape [{}]: its samples hold no values", path, xName,
                                fmt::join(xh.shape, ", ")));
  }
  Dataset d;
  d.name = path;
  d.ids = npzHoldsIds(npz, xName, xh);
  at::Tensor trainLabels = npzLabels(npz, "y_train"), testLabels = npzLabels(npz, "y_test");
  d.classes = npzClasses(npz, trainLabels, testLabels, source.ignoreIndex);
  d.labels = split == Split::Train ? trainLabels : testLabels;
  if (d.labels.size(0) != xh.shape[0]) {
    throw DataError(fmt::format("{}: '{}' holds {} samples but '{}' {} labels", path, xName, xh.shape[0], yName,
                                d.labels.size(0)));
  }
  if (d.classes > 0 && d.labels.dim() > 2) {
    throw DataError(fmt::format("{}: '{}' must hold one class label per sample [N], or one per position [N, L]; it is "
                                "[{}]", path, yName, fmt::join(d.labels.sizes(), ", ")));
  }
  // Before the allocation: the split's samples must fit this host's memory, shared by its
  // ranks (each holds its own copy). Ids become int64 beside the file's array.
  requireMemoryFor(static_cast<double>(xh.elements()) * static_cast<double>(xh.itemSize + (d.ids ? 8 : 0)), path,
                   fmt::format("'{}'", xName));
  d.images = npzTensor(npz, xName, xh);
  if (d.ids) {
    d.images = d.images.to(torch::kInt64);
    const std::int64_t lowest = d.images.min().item<std::int64_t>();
    if (lowest < 0) throw DataError(fmt::format("{}: '{}' holds the id {}; token ids are 0, 1, ...", path, xName, lowest));
    d.maxId = d.images.max().item<std::int64_t>();
  }
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
    if (d.ids) throw DataError(fmt::format("{}: 'mean' and 'std' normalise values; x holds token ids", path));
    const std::int64_t channels = xh.shape.size() > 1 ? xh.shape[1] : 1;
    d.mean = npzStatistic(npz, "mean", channels);
    d.std = npzStatistic(npz, "std", channels);
  }
  // Every member, not only the training arrays: mean, std and classes change what a rank
  // trains on too.
  std::vector<std::string> identity;
  for (const std::string& name : npz.names()) identity.push_back(fmt::format("{} crc32 {:08x}", name, npz.checksum(name)));
  d.fileIdentity = fmt::format("{}", fmt::join(identity, ", "));
  return d;
}

// A token file's split (TokenFile.h): the train split's samples are the windows starting at
// every offset 0 .. ids - L - 1 (ShardSampler draws them); the test split's are W windows
// at k x stride, k < W: all the non-overlapping ones ((ids - 1) / L), or evalWindows of
// them spread evenly over the file, stride (ids - 1 - L) / (W - 1).
Dataset loadTokenDataset(const DataSource& source, Split split) {
  const std::string path = split == Split::Train ? source.name : validationPath(source.name);
  auto tokens = std::make_shared<const TokenFile>(path);
  const auto count = static_cast<std::int64_t>(tokens->count()), length = source.blockSize;
  if (length <= 0) throw ConfigError(fmt::format("--dataset {} is a token file: give --block-size L", source.name));
  if (count < length + 1) {
    throw DataError(fmt::format("{}: {} tokens, too few for one window of --block-size {} and its targets (needs {}); "
                                "lower --block-size", path, count, length, length + 1));
  }
  Dataset d;
  d.name = source.name;
  d.ids = true;
  d.tokens = tokens;
  d.blockSize = length;
  d.maxId = tokens->maxId();
  d.fileIdentity = tokens->identity();
  if (split == Split::Train) {
    d.windows = count - length;
    d.windowStride = 1;
    // The test split must take a window too: said now, not when pseval first reads it.
    std::string val;
    try {
      val = validationPath(source.name);
    } catch (const DataError&) {  // a name without "train": no test split to check
    }
    // Its ids too must fit the model's vocabulary (checked at start-up against maxId).
    if (!val.empty() && fs::exists(val)) d.maxId = std::max(d.maxId, loadTokenDataset(source, Split::Test).maxId);
  } else {
    const std::int64_t all = (count - 1) / length;
    d.windows = source.evalWindows > 0 ? std::min(all, source.evalWindows) : all;
    d.windowStride = d.windows > 1 ? (count - 1 - length) / (d.windows - 1) : length;
  }
  d.classes = static_cast<int>(std::min<std::int64_t>(d.maxId + 1, std::numeric_limits<int>::max()));
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

DatasetInfo datasetInfo(const std::string& name, std::int64_t ignoreIndex) {
  if (config::isTokenFile(name)) {
    throw ConfigError(fmt::format("--dataset {}: a token file's shape and vocabulary are known once it is read: it "
                                  "takes a model of your own (--model FILE)", name));
  }
  if (config::isDatasetFile(name)) {
    NpzFile npz(name);
    const NpyArray x = npz.header("x_train");
    const int classes = npzClasses(npz, npzLabels(npz, "y_train"), npzLabels(npz, "y_test"), ignoreIndex);
    return {name, "NumPy .npz file", std::vector<std::int64_t>(x.shape.begin() + std::min<std::size_t>(1, x.shape.size()), x.shape.end()),
            classes, ""};
  }
  static const std::vector<DatasetInfo> list = datasetList();
  std::string known;
  for (const auto& info : list) {
    if (info.name == name) return info;
    known += (known.empty() ? "" : ", ") + info.name;
  }
  throw ConfigError(fmt::format("unknown dataset '{}' (known: {}; or an .npz file, or a token file DIR/train.bin)",
                                name, known));
}

namespace {

Dataset loadSplit(const DataSource& source, Split split) {
  const std::string& name = source.name;
  if (config::isTokenFile(name)) return loadTokenDataset(source, split);
  if (config::isDatasetFile(name)) return loadNpzDataset(source, split);
  const DatasetInfo info = datasetInfo(name);
  const std::string where = source.dir.empty() ? info.defaultDir : source.dir;
  if (name == "fashion-mnist") return loadIdxDataset(name, where, split, {0.2860}, {0.3530});
  if (name == "mnist") return loadIdxDataset(name, where, split, {0.1307}, {0.3081});
  if (name == "cifar10") return loadCifarDataset(name, where, split, 10);
  if (name == "cifar100") return loadCifarDataset(name, where, split, 100);
  return syntheticDataset(info, split, source.syntheticSize);
}

}  // namespace

DataSource sourceOf(const config::TrainConfig& cfg) {
  DataSource source;
  source.name = cfg.dataset;
  source.dir = cfg.dataDir;
  source.syntheticSize = cfg.syntheticSize;
  source.blockSize = cfg.blockSize;
  source.ignoreIndex = cfg.ignoreIndex;
  return source;
}

std::vector<std::string> filesOf(const DataSource& source) {
  const std::string& name = source.name;
  if (config::isTokenFile(name)) {
    try {
      return {name, validationPath(name)};
    } catch (const DataError&) {
      return {name};
    }
  }
  if (config::isDatasetFile(name)) return {name};
  const DatasetInfo info = datasetInfo(name);
  if (info.defaultDir.empty()) return {};
  const std::string where = source.dir.empty() ? info.defaultDir : source.dir;
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(where, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files.empty() ? std::vector<std::string>{where} : files;
}

Dataset loadDataset(const DataSource& source, Split split) {
  Dataset d = loadSplit(source, split);
  d.ignoreIndex = source.ignoreIndex;
  return d;
}

at::Tensor Dataset::normalize(const at::Tensor& samples) const {
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

std::pair<at::Tensor, at::Tensor> Dataset::batch(const std::vector<std::int64_t>& indices,
                                                 std::uint64_t augmentSeed) const {
  const auto n = static_cast<std::int64_t>(indices.size());
  if (tokens) {
    // Window i: ids [start, start + L + 1), the first L the sample, the last L its targets.
    at::Tensor ids = torch::empty({n, blockSize + 1}, torch::kInt64);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto start = static_cast<std::uint64_t>(indices[static_cast<std::size_t>(i)] * windowStride);
      tokens->copy(start, static_cast<std::uint64_t>(blockSize + 1), ids.data_ptr<std::int64_t>() + i * (blockSize + 1));
    }
    return {ids.narrow(1, 0, blockSize).contiguous(), ids.narrow(1, 1, blockSize).contiguous()};
  }
  auto index = torch::from_blob(const_cast<std::int64_t*>(indices.data()), {n}, torch::kInt64);
  at::Tensor raw = images.index_select(0, index);
  if (augment) raw = cropAndFlip(raw, augmentSeed);
  return {normalize(raw), labels.index_select(0, index)};
}

}  // namespace pstrain::data
