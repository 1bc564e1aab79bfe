// The built-in datasets beyond IDX (data/Dataset, data/Cifar): synthetic, CIFAR files,
// augmentation.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "data/Cifar.h"
#include "data/Dataset.h"
#include "runtime/Errors.h"
#include "tests/common/DatasetTensors.h"
#include "tests/common/ScratchDir.h"

using namespace pstrain;
namespace fs = std::filesystem;

TEST(Datasets, SyntheticIsDeterministicAndBalanced) {
  auto a = data::loadDataset("synthetic", "", data::Split::Train, 1000);
  auto b = data::loadDataset("synthetic", "", data::Split::Train, 1000);
  auto test = data::loadDataset("synthetic", "", data::Split::Test, 1000);
  EXPECT_TRUE(testsupport::tensorsOf(a).images.equal(testsupport::tensorsOf(b).images));
  EXPECT_TRUE(testsupport::tensorsOf(a).labels.equal(testsupport::tensorsOf(b).labels));
  EXPECT_EQ(test.size(), 166);
  auto counts = torch::bincount(testsupport::tensorsOf(a).labels);
  EXPECT_GT(counts.min().item<std::int64_t>(), 60);
}

TEST(Datasets, CifarReadsTenAndHundredClassFilesAndRejectsBadOnes) {
  testsupport::ScratchDir dir("cifar");
  data::CifarArrays arrays;
  for (int i = 0; i < 7; ++i) {
    arrays.labels.push_back(static_cast<std::uint8_t>(i));
    for (int p = 0; p < 3072; ++p) arrays.pixels.push_back(static_cast<std::uint8_t>((i * 3072 + p) % 251));
  }
  for (int b = 1; b <= 5; ++b) data::writeCifar((dir / fmt::format("data_batch_{}.bin", b)).string(), arrays, 10);
  data::writeCifar((dir / "test_batch.bin").string(), arrays, 10);
  auto train = data::loadDataset("cifar10", dir.str(), data::Split::Train, 0);
  auto test = data::loadDataset("cifar10", dir.str(), data::Split::Test, 0);
  EXPECT_EQ(train.size(), 35);
  EXPECT_EQ(test.size(), 7);
  EXPECT_EQ(testsupport::tensorsOf(train).images.sizes(), (std::vector<std::int64_t>{35, 3, 32, 32}));
  EXPECT_EQ(testsupport::tensorsOf(train).labels[8].item<std::int64_t>(), 1);
  EXPECT_EQ(testsupport::tensorsOf(train).images[1][2][0][0].item<int>(), (3072 + 2048) % 251);  // blue plane of sample 1
  EXPECT_TRUE(testsupport::tensorsOf(train).augment);
  EXPECT_FALSE(testsupport::tensorsOf(test).augment);
  // The folder itself is a dataset too (data/Formats.h: by its contents).
  const data::Dataset byPath = data::loadDataset(dir.str(), "", data::Split::Train, 0);
  EXPECT_EQ(byPath.classes, 10);
  EXPECT_TRUE(testsupport::tensorsOf(byPath).images.equal(testsupport::tensorsOf(train).images));
  EXPECT_EQ(data::datasetInfo(dir.str()).shape, (std::vector<std::int64_t>{3, 32, 32}));

  data::writeCifar((dir / "train.bin").string(), arrays, 100);
  data::writeCifar((dir / "test.bin").string(), arrays, 100);
  auto hundred = data::loadDataset("cifar100", dir.str(), data::Split::Train, 0);
  EXPECT_EQ(hundred.classes, 100);
  EXPECT_EQ(testsupport::tensorsOf(hundred).labels[6].item<std::int64_t>(), 6);

  auto error = [&](const std::string& name) {
    try {
      data::loadDataset(name, dir.str(), data::Split::Train, 0);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  fs::resize_file(dir / "data_batch_3.bin", 3073 * 2 + 100);
  EXPECT_NE(error("cifar10").find("data_batch_3.bin: 6246 bytes is not a whole number of 3073-byte"), std::string::npos)
      << error("cifar10");
  fs::remove(dir / "data_batch_3.bin");
  EXPECT_NE(error("cifar10").find("data_batch_3.bin: not found"), std::string::npos);
  arrays.labels[2] = 42;
  data::writeCifar((dir / "train.bin").string(), arrays, 100);
  EXPECT_EQ(error("cifar100"), "");  // 42 is a valid fine label
  arrays.labels[2] = 142;
  data::writeCifar((dir / "train.bin").string(), arrays, 100);
  EXPECT_NE(error("cifar100").find("label 142"), std::string::npos);
}

TEST(Datasets, AugmentationCropAndFlipAreReproducibleAndKeepPixels) {
  auto d = data::loadDataset("synthetic-cifar", "", data::Split::Train, 64);
  ASSERT_TRUE(testsupport::tensorsOf(d).augment);
  std::vector<std::int64_t> indices = {0, 1, 2, 3, 4, 5, 6, 7};
  auto [a, la] = d.batch(indices, 7);
  auto [b, lb] = d.batch(indices, 7);
  auto [c, lc] = d.batch(indices, 8);
  EXPECT_TRUE(a.equal(b));
  EXPECT_FALSE(a.equal(c));
  EXPECT_TRUE(la.equal(lc));
  // Every augmented image is a shifted, possibly mirrored window of the zero-padded original.
  auto raw = testsupport::tensorsOf(d).images.index_select(0, torch::tensor(indices));
  auto padded = torch::constant_pad_nd(raw, {4, 4, 4, 4});
  for (std::int64_t i = 0; i < 8; ++i) {
    bool found = false;
    for (int dy = 0; dy <= 8 && !found; ++dy) {
      for (int dx = 0; dx <= 8 && !found; ++dx) {
        auto window = testsupport::tensorsOf(d).normalize(padded[i].narrow(1, dy, 32).narrow(2, dx, 32).unsqueeze(0))[0];
        found = a[i].equal(window) || a[i].equal(window.flip({2}));
      }
    }
    EXPECT_TRUE(found) << "sample " << i;
  }
  auto test = data::loadDataset("synthetic-cifar", "", data::Split::Test, 64);
  EXPECT_FALSE(testsupport::tensorsOf(test).augment);
}
