#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "data/Cifar.h"
#include "data/Dataset.h"
#include "data/Idx.h"
#include "data/ShardSampler.h"
#include "runtime/roles/Balance.h"
#include "runtime/Errors.h"
#include "tests/common/ScratchDir.h"

using namespace pstrain;
namespace fs = std::filesystem;

namespace {

class IdxFiles : public ::testing::Test {
 protected:

  // A valid 5-sample MNIST-format split in `dir`.
  void writeSplit(const std::string& prefix, bool gz, int labelsFirst = 0) {
    data::IdxArray images{{5, 28, 28}, std::vector<std::uint8_t>(5 * 784)};
    for (std::size_t i = 0; i < images.bytes.size(); ++i) images.bytes[i] = i % 251;
    data::IdxArray labels{{5}, {std::uint8_t(labelsFirst), 1, 2, 3, 9}};
    std::string ext = gz ? ".gz" : "";
    data::writeIdx((dir / (prefix + "-images-idx3-ubyte" + ext)).string(), images);
    data::writeIdx((dir / (prefix + "-labels-idx1-ubyte" + ext)).string(), labels);
  }

  std::string loadError(data::Split split = data::Split::Train) {
    try {
      data::loadDataset("fashion-mnist", dir.string(), split, 0);
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  }

  testsupport::ScratchDir scratch{"idx"};
  const fs::path& dir = scratch.path();
};

void truncate(const fs::path& path, std::size_t keep) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::min(keep, bytes.size()));
}

}  // namespace

TEST_F(IdxFiles, ReadsGzippedAndPlainFilesAlike) {
  writeSplit("train", true);
  writeSplit("t10k", false);
  auto train = data::loadDataset("fashion-mnist", dir.string(), data::Split::Train, 0);
  auto test = data::loadDataset("fashion-mnist", dir.string(), data::Split::Test, 0);
  ASSERT_EQ(train.size(), 5);
  EXPECT_TRUE(train.images.equal(test.images));
  EXPECT_EQ(train.labels[4].item<std::int64_t>(), 9);
  EXPECT_EQ(train.images[0][0][0][3].item<int>(), 3);
  auto [x, y] = train.batch({4, 0});
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{2, 1, 28, 28}));
  EXPECT_NEAR(x[1][0][0][1].item<float>(), (1 / 255.0 - 0.2860) / 0.3530, 1e-6);
  EXPECT_EQ(y[0].item<std::int64_t>(), 9);
}

TEST_F(IdxFiles, MissingFileNamesThePathAndTheFix) {
  std::string error = loadError();
  EXPECT_NE(error.find("train-images-idx3-ubyte"), std::string::npos) << error;
  EXPECT_NE(error.find("--data-dir"), std::string::npos) << error;
}

TEST_F(IdxFiles, TruncatedGzipIsAnError) {
  writeSplit("train", true);
  truncate(dir / "train-images-idx3-ubyte.gz", 200);
  std::string error = loadError();
  EXPECT_NE(error.find("train-images-idx3-ubyte.gz"), std::string::npos) << error;
}

TEST_F(IdxFiles, TruncatedPlainFileSaysHowMuchIsMissing) {
  writeSplit("train", false);
  truncate(dir / "train-images-idx3-ubyte", 16 + 784 * 3);
  std::string error = loadError();
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  EXPECT_NE(error.find(std::to_string(784 * 5)), std::string::npos) << error;
}

TEST_F(IdxFiles, GarbledMagicIsAnError) {
  writeSplit("train", false);
  std::fstream f(dir / "train-labels-idx1-ubyte", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(2);
  f.put(0x0d);
  f.close();
  std::string error = loadError();
  EXPECT_NE(error.find("not an IDX file"), std::string::npos) << error;
  EXPECT_NE(error.find("train-labels-idx1-ubyte"), std::string::npos) << error;
}

TEST_F(IdxFiles, GarbledCompressedBytesAreAnError) {
  writeSplit("train", true);
  fs::path path = dir / "train-images-idx3-ubyte.gz";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  auto size = fs::file_size(path);
  for (std::uintmax_t at = 30; at + 20 < size; at += 7) {
    f.seekp(at);
    f.put(static_cast<char>(0xA5));
  }
  f.close();
  EXPECT_NE(loadError().find("train-images-idx3-ubyte.gz"), std::string::npos);
}

TEST_F(IdxFiles, TrailingBytesWrongRankAndBadLabelsAreErrors) {
  writeSplit("train", false, 12);
  EXPECT_NE(loadError().find("label 12"), std::string::npos);
  writeSplit("train", false);
  std::ofstream(dir / "train-labels-idx1-ubyte", std::ios::app | std::ios::binary) << "x";
  EXPECT_NE(loadError().find("unexpected bytes"), std::string::npos);
  data::writeIdx((dir / "train-labels-idx1-ubyte").string(), {{5, 1}, std::vector<std::uint8_t>(5)});
  EXPECT_NE(loadError().find("dimensions"), std::string::npos);
}

TEST_F(IdxFiles, CountMismatchBetweenImagesAndLabels) {
  writeSplit("train", false);
  data::writeIdx((dir / "train-labels-idx1-ubyte").string(), {{4}, {0, 1, 2, 3}});
  std::string error = loadError();
  EXPECT_NE(error.find("5 images"), std::string::npos) << error;
}

TEST(ShardSampler, ShardsAreDisjointAndCoverEveryEpoch) {
  const std::int64_t n = 103;
  data::ShardSampler sampler(n, 3, 8, 42);
  EXPECT_EQ(sampler.shardSize(), 35);
  EXPECT_EQ(sampler.stepsPerEpoch(), 5);
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<std::int64_t> seen;
    for (int shard = 0; shard < 3; ++shard) {
      for (std::int64_t s = 0; s < sampler.stepsPerEpoch(); ++s) {
        auto batch = sampler.batch(shard, epoch * sampler.stepsPerEpoch() + s);
        EXPECT_EQ(static_cast<std::int64_t>(batch.size()), s + 1 < sampler.stepsPerEpoch() ? 8 : 3);
        EXPECT_EQ(sampler.batchSizeAt(epoch * sampler.stepsPerEpoch() + s), static_cast<std::int64_t>(batch.size()));
        seen.insert(batch.begin(), batch.end());
      }
    }
    for (std::int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << "sample " << i;
    EXPECT_EQ(seen.size(), 105u);  // 2 padding samples repeat the start of the permutation
  }
  EXPECT_NE(sampler.permutation(0), sampler.permutation(1)) << "no reshuffle per epoch";
  EXPECT_EQ(sampler.permutation(1), data::ShardSampler(n, 3, 8, 42).permutation(1));
  EXPECT_NE(sampler.permutation(0), data::ShardSampler(n, 3, 8, 43).permutation(0));
}

// Virtual shards: whatever the number of workers, every sample of an epoch is computed
// exactly once, by exactly one worker, and each worker gets ceil or floor of V / N shards.
TEST(ShardSampler, VirtualShardsCoverEveryEpochWhateverTheWorkers) {
  const int shards = 6;
  data::ShardSampler sampler(600, shards, 8, 3);
  for (int workers : {1, 2, 3, 4, 6}) {
    std::vector<int> owner(shards, -1);
    for (int w = 0; w < workers; ++w) {
      const auto mine = data::virtualShardsOf(w, workers, shards);
      EXPECT_TRUE(mine.size() == std::size_t(shards / workers) || mine.size() == std::size_t(shards / workers + 1));
      for (int v : mine) {
        EXPECT_EQ(owner[v], -1) << "shard " << v << " twice";
        owner[v] = w;
      }
    }
    for (int e = 0; e < 2; ++e) {
      std::vector<int> seen(600, 0);
      for (std::int64_t step = e * sampler.stepsPerEpoch(); step < (e + 1) * sampler.stepsPerEpoch(); ++step) {
        for (int v = 0; v < shards; ++v) {
          ASSERT_GE(owner[v], 0) << workers << " workers leave shard " << v;
          for (auto i : sampler.batch(v, step)) ++seen[i];
        }
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << workers << " workers";
    }
  }
  EXPECT_THROW(data::virtualShardsOf(0, 7, 6), ConfigError);
}

TEST(Synthetic, IsDeterministicAndBalanced) {
  auto a = data::loadDataset("synthetic", "", data::Split::Train, 1000);
  auto b = data::loadDataset("synthetic", "", data::Split::Train, 1000);
  auto test = data::loadDataset("synthetic", "", data::Split::Test, 1000);
  EXPECT_TRUE(a.images.equal(b.images));
  EXPECT_TRUE(a.labels.equal(b.labels));
  EXPECT_EQ(test.size(), 166);
  auto counts = torch::bincount(a.labels);
  EXPECT_GT(counts.min().item<std::int64_t>(), 60);
}

TEST(Cifar, ReadsTenAndHundredClassFilesAndRejectsBadOnes) {
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
  EXPECT_EQ(train.images.sizes(), (std::vector<std::int64_t>{35, 3, 32, 32}));
  EXPECT_EQ(train.labels[8].item<std::int64_t>(), 1);
  EXPECT_EQ(train.images[1][2][0][0].item<int>(), (3072 + 2048) % 251);  // blue plane of sample 1
  EXPECT_TRUE(train.augment);
  EXPECT_FALSE(test.augment);

  data::writeCifar((dir / "train.bin").string(), arrays, 100);
  data::writeCifar((dir / "test.bin").string(), arrays, 100);
  auto hundred = data::loadDataset("cifar100", dir.str(), data::Split::Train, 0);
  EXPECT_EQ(hundred.classes, 100);
  EXPECT_EQ(hundred.labels[6].item<std::int64_t>(), 6);

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

TEST(Augmentation, CropAndFlipAreReproducibleAndKeepPixels) {
  auto d = data::loadDataset("synthetic-cifar", "", data::Split::Train, 64);
  ASSERT_TRUE(d.augment);
  std::vector<std::int64_t> indices = {0, 1, 2, 3, 4, 5, 6, 7};
  auto [a, la] = d.batch(indices, 7);
  auto [b, lb] = d.batch(indices, 7);
  auto [c, lc] = d.batch(indices, 8);
  EXPECT_TRUE(a.equal(b));
  EXPECT_FALSE(a.equal(c));
  EXPECT_TRUE(la.equal(lc));
  // Every augmented image is a shifted, possibly mirrored window of the zero-padded original.
  auto raw = d.images.index_select(0, torch::tensor(indices));
  auto padded = torch::constant_pad_nd(raw, {4, 4, 4, 4});
  for (std::int64_t i = 0; i < 8; ++i) {
    bool found = false;
    for (int dy = 0; dy <= 8 && !found; ++dy) {
      for (int dx = 0; dx <= 8 && !found; ++dx) {
        auto window = d.normalize(padded[i].narrow(1, dy, 32).narrow(2, dx, 32).unsqueeze(0))[0];
        found = a[i].equal(window) || a[i].equal(window.flip({2}));
      }
    }
    EXPECT_TRUE(found) << "sample " << i;
  }
  auto test = data::loadDataset("synthetic-cifar", "", data::Split::Test, 64);
  EXPECT_FALSE(test.augment);
}

// --balance: shards in proportion to speed, one each at least, all of them dealt; a
// worker's shards follow those of the ranks before it.
TEST(Balance, SharesFollowSpeedAndCoverEveryShard) {
  EXPECT_EQ(roles::ShareBalancer::proportional({1, 1, 0.5}, 12), (std::vector<int>{5, 5, 2}));
  EXPECT_EQ(roles::ShareBalancer::proportional({1, 1, 1}, 3), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(roles::ShareBalancer::proportional({100, 1}, 6), (std::vector<int>{5, 1}));
  const float shares[] = {0, 5, 5, 2};
  EXPECT_EQ(roles::shardsOfRank(shares, 4, 2), (std::vector<int>{5, 6, 7, 8, 9}));
  EXPECT_EQ(roles::shardsOfRank(shares, 4, 3), (std::vector<int>{10, 11}));
  // A worker three times slower per shard gets fewer after a few steps; the others more.
  roles::ShareBalancer balancer(4, 12, true);
  EXPECT_EQ(balancer.counts(), (std::vector<int>{4, 4, 4}));
  for (int step = 0; step < 10; ++step) {
    const auto& c = balancer.counts();
    const float compute[] = {0, 0.01f * c[0], 0.01f * c[1], 0.03f * c[2]};
    balancer.record(compute);
  }
  EXPECT_EQ(balancer.counts(), (std::vector<int>{5, 5, 2}));
}
