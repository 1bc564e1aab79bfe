// The IDX reader (data/Idx) and the built-in MNIST-format datasets: good files, gzipped or
// not, and missing, truncated or garbled ones, each a clear error.
#include <gtest/gtest.h>
#include <zlib.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "data/Dataset.h"
#include "data/Formats.h"
#include "data/Idx.h"
#include "runtime/Errors.h"
#include "tests/common/DatasetTensors.h"
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
  EXPECT_TRUE(testsupport::tensorsOf(train).images.equal(testsupport::tensorsOf(test).images));
  EXPECT_EQ(testsupport::tensorsOf(train).labels[4].item<std::int64_t>(), 9);
  EXPECT_EQ(testsupport::tensorsOf(train).images[0][0][0][3].item<int>(), 3);
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

// A gzipped header that promises more than this host's memory holds (here 10^10 pixels, 50
// GB as read and as floats) is refused before anything is allocated: gzip makes such data
// a few megabytes, and the reader used to grow with it up to 16 GiB.
TEST_F(IdxFiles, AHeaderPromisingMoreThanTheMemoryIsRefusedFirst) {
  writeSplit("train", true);
  const fs::path path = dir / "train-images-idx3-ubyte.gz";
  gzFile out = gzopen(path.c_str(), "wb");
  const unsigned char header[16] = {0, 0, 8, 3, 0x00, 0x01, 0x86, 0xa0, 0, 0, 0x03, 0xe8, 0, 0, 0, 100};  // 100000 x 1000 x 100
  gzwrite(out, header, sizeof header);
  gzclose(out);
  const std::string error = loadError();
  EXPECT_NE(error.find("needs"), std::string::npos) << error;
  EXPECT_NE(error.find("GiB of memory"), std::string::npos) << error;
  EXPECT_NE(error.find("train-images-idx3-ubyte.gz"), std::string::npos) << error;
}

// Issue 51: a format is a reader and a row (data/Formats.h). A folder of IDX files is a
// dataset by its contents, of any image size, its classes counted from both splits' labels,
// normalised with its training split's statistics; a path no row reads is refused with
// what each reads.
TEST_F(IdxFiles, AFolderOfIdxFilesIsADatasetByItsContents) {
  data::IdxArray images{{4, 5, 3}, std::vector<std::uint8_t>(4 * 15)};
  for (std::size_t i = 0; i < images.bytes.size(); ++i) images.bytes[i] = static_cast<std::uint8_t>(i % 2 ? 200 : 0);
  data::writeIdx((dir / "train-images-idx3-ubyte").string(), images);
  data::writeIdx((dir / "train-labels-idx1-ubyte").string(), {{4}, {0, 1, 0, 1}});
  data::writeIdx((dir / "t10k-images-idx3-ubyte.gz").string(), images);
  data::writeIdx((dir / "t10k-labels-idx1-ubyte.gz").string(), {{4}, {3, 0, 0, 0}});
  EXPECT_STREQ(data::formatOf(dir.string()).name, "idx");
  const data::DatasetInfo info = data::datasetInfo(dir.string());
  EXPECT_EQ(info.shape, (std::vector<std::int64_t>{1, 5, 3}));
  EXPECT_EQ(info.classes, 4);  // the test split's label 3
  const data::Dataset test = data::loadDataset(dir.string(), "", data::Split::Test, 0);
  EXPECT_EQ(test.classes, 4);
  const auto [x, y] = test.batch({0});
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{1, 1, 5, 3}));
  // Pixels alternate 0 and 200: mean 100 / 255, standard deviation 100 / 255.
  EXPECT_NEAR(x[0][0][0][0].item<float>(), -1.0, 1e-4);
  EXPECT_NEAR(x[0][0][0][1].item<float>(), 1.0, 1e-4);
  EXPECT_EQ(y[0].item<std::int64_t>(), 3);
  EXPECT_EQ(data::filesOf(data::DataSource{dir.string(), ""}).size(), 4u);
}

TEST_F(IdxFiles, APathNoFormatReadsIsRefusedWithWhatEachReads) {
  std::string error;
  try {
    data::formatOf((dir / "nothing-here").string());
  } catch (const ConfigError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("unknown dataset '" + (dir / "nothing-here").string() + "'"), std::string::npos) << error;
  for (const char* what : {"fashion-mnist", "IDX files", "CIFAR binary folder", ".npz", "token file"}) {
    EXPECT_NE(error.find(what), std::string::npos) << what << " in " << error;
  }
  // A zip archive of another name is read as an .npz (its first bytes say so).
  std::ofstream(dir / "arrays.data", std::ios::binary) << std::string("PK\x03\x04", 4) << "rest";
  EXPECT_STREQ(data::formatOf((dir / "arrays.data").string()).name, "npz");
  EXPECT_STREQ(data::formatOf("cifar10").name, "cifar");
  EXPECT_STREQ(data::formatOf("some/train.npy").name, "tokens");
}
