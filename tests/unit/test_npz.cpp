// The .npz reader (data/Npz, over runtime/zip): archives written here byte by byte, as
// np.savez (stored) and np.savez_compressed (deflated) write them, good and damaged; and
// the datasets made of them (data/Dataset): token ids, labels per position.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "data/Dataset.h"
#include "data/Npz.h"
#include "runtime/Errors.h"
#include "tests/common/DatasetTensors.h"
#include "tests/common/ScratchDir.h"
#include "tests/common/ZipOf.h"

using namespace pstrain;
using testsupport::Member;
using testsupport::zipOf;

namespace {

// An .npy array: the magic, version 1.0, the header dict padded to 64 bytes, the data.
std::string npy(const std::string& descr, const std::string& shape, const std::string& data, bool fortran = false) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

template <typename T>
std::string bytesOf(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

class Npz : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (scratch.path() / name).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  std::string errorOf(const std::string& path, const std::string& array) {
    try {
      data::NpzFile npz(path);
      npz.read(array, [](const data::NpyArray& a) {
        static std::vector<char> sink;
        sink.resize(a.elements() * a.itemSize);
        return static_cast<void*>(sink.data());
      });
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  }
  testsupport::ScratchDir scratch{"npz"};
};

const std::vector<float> kValues = {1.5f, -2, 3, 4.25f, 5, 6};

}  // namespace

TEST_F(Npz, ReadsStoredAndDeflatedArraysWithTheirShapes) {
  for (const bool deflate : {false, true}) {
    const std::string path = write(deflate ? "deflated.npz" : "stored.npz",
                                   zipOf({{"x.npy", npy("<f4", "(2, 3)", bytesOf(kValues)), deflate},
                                          {"y.npy", npy("<i8", "(2,)", bytesOf(std::vector<std::int64_t>{7, 9})), deflate},
                                          {"classes.npy", npy("<i8", "()", bytesOf(std::vector<std::int64_t>{10})), deflate}}));
    data::NpzFile npz(path);
    EXPECT_TRUE(npz.has("x"));
    EXPECT_FALSE(npz.has("z"));
    const data::NpyArray x = npz.header("x");
    EXPECT_EQ(x.dtype, "f4");
    EXPECT_EQ(x.shape, (std::vector<std::int64_t>{2, 3}));
    std::vector<float> values(6);
    npz.read("x", [&](const data::NpyArray&) { return static_cast<void*>(values.data()); });
    EXPECT_EQ(values, kValues);
    EXPECT_TRUE(npz.header("classes").shape.empty());  // a scalar
    EXPECT_EQ(npz.names(), (std::vector<std::string>{"classes", "x", "y"}));
  }
}

TEST_F(Npz, AMissingArrayNamesTheOnesThere) {
  const std::string path = write("one.npz", zipOf({{"x.npy", npy("<f4", "(6,)", bytesOf(kValues))}}));
  const std::string error = errorOf(path, "y_train");
  EXPECT_NE(error.find("no array 'y_train' (it holds: x)"), std::string::npos) << error;
}

TEST_F(Npz, DamagedArchivesAreClearErrors) {
  std::string good = zipOf({{"x.npy", npy("<f4", "(6,)", bytesOf(kValues))}});
  std::string flipped = good;
  flipped[100] ^= 0x55;  // inside x's data: the CRC-32 no longer matches
  EXPECT_NE(errorOf(write("flipped.npz", flipped), "x").find("CRC-32 mismatch"), std::string::npos);
  const std::string truncated = errorOf(write("truncated.npz", good.substr(0, good.size() / 2)), "x");
  EXPECT_NE(truncated.find("not an .npz file, or truncated"), std::string::npos) << truncated;
  EXPECT_NE(errorOf(write("text.npz", "just text, no zip at all"), "x").find("not an .npz"), std::string::npos);
  // The directory says more bytes than the member has.
  const std::string shortData = npy("<f4", "(8,)", bytesOf(kValues));
  const std::string shortError = errorOf(write("short.npz", zipOf({{"x.npy", shortData}})), "x");
  EXPECT_NE(shortError.find("holds 24 bytes of data, its shape needs 8 x 4"), std::string::npos) << shortError;
}

// A deflated member that claims more than deflate can produce from its bytes (a zip bomb:
// the claim would size the allocation) is refused when the archive is opened, before any
// array is read; so is a stored one whose two sizes differ.
TEST_F(Npz, ClaimsBeyondDeflatesRatioAreRefusedBeforeAnyAllocation) {
  const std::string x = npy("<f4", "(6,)", bytesOf(kValues));
  Member bomb{"x.npy", x, true, std::uint64_t(1) << 31};  // 2 GiB from a few dozen bytes
  const std::string error = errorOf(write("bomb.npz", zipOf({bomb})), "x");
  EXPECT_NE(error.find("claims 2147483648 bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("zip bomb"), std::string::npos) << error;
  Member stored{"x.npy", x, false, x.size() * 2};
  EXPECT_NE(errorOf(write("stored.npz", zipOf({stored})), "x").find("zip bomb"), std::string::npos);
  // Honest compressed zeros are far from the limit and read back.
  const std::vector<float> zeros(1 << 16, 0.0f);
  const std::string path = write("zeros.npz", zipOf({{"x.npy", npy("<f4", "(65536,)", bytesOf(zeros)), true}}));
  EXPECT_EQ(errorOf(path, "x"), "");
}

TEST_F(Npz, UnsupportedLayoutsSayWhatToDo) {
  const std::string big = errorOf(write("be.npz", zipOf({{"x.npy", npy(">f4", "(6,)", bytesOf(kValues))}})), "x");
  EXPECT_NE(big.find("dtype '>f4' is not supported"), std::string::npos) << big;
  const std::string fortran =
      errorOf(write("f.npz", zipOf({{"x.npy", npy("<f4", "(2, 3)", bytesOf(kValues), true)}})), "x");
  EXPECT_NE(fortran.find("Fortran order"), std::string::npos) << fortran;
}

namespace {

// An .npz of np.savez's four arrays (and `extra` ones) with samples `x` of dtype `xType`.
std::string datasetNpz(const std::string& xType, const std::string& x, const std::string& xShape,
                       const std::string& yType, const std::string& y, const std::string& yShape,
                       std::vector<Member> extra = {}) {
  std::vector<Member> members = {{"x_train.npy", npy(xType, xShape, x)}, {"y_train.npy", npy(yType, yShape, y)},
                                 {"x_test.npy", npy(xType, xShape, x)}, {"y_test.npy", npy(yType, yShape, y)}};
  members.insert(members.end(), extra.begin(), extra.end());
  return zipOf(members);
}

}  // namespace

// A split that needs more memory than the host has for its ranks is refused, with the
// numbers, before its array is allocated. (The host's ranks as Open MPI tells them: a
// million ranks leave each of them less than 1 MiB of this host.)
TEST_F(Npz, ASplitBeyondTheHostsMemoryForItsRanksIsRefused) {
  const std::vector<std::uint8_t> pixels(1 << 20, 7);  // 1 MiB of samples
  const std::string y = bytesOf(std::vector<std::int64_t>(1024, 1));
  const std::string path = write("big.npz", datasetNpz("|u1", bytesOf(pixels), "(1024, 1, 32, 32)", "<i8", y, "(1024,)"));
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1000000", 1);
  std::string error;
  try {
    data::loadDataset(path, "", data::Split::Train, 0);
  } catch (const DataError& e) {
    error = e.what();
  }
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_NE(error.find("'x_train' needs 0.00 GiB of memory in each of this host's 1000000 rank(s), 976.56 GiB in all"),
            std::string::npos) << error;
  EXPECT_EQ(data::loadDataset(path, "", data::Split::Train, 0).size(), 1024);  // one rank: it fits
}

// Integer samples are token ids: int64 as they are, never scaled or normalised; uint8 only
// with ids=1 (else pixels). uint16 above 32767 stays what it is.
TEST_F(Npz, IntegerSamplesAreTokenIds) {
  const std::vector<std::uint16_t> ids = {1, 65535, 3, 40000};
  const std::string y = bytesOf(std::vector<std::int64_t>{0, 1});
  const data::Dataset u2 = data::loadDataset(write("u2.npz", datasetNpz("<u2", bytesOf(ids), "(2, 2)", "<i8", y, "(2,)")),
                                             "", data::Split::Train, 0);
  EXPECT_TRUE(u2.ids);
  EXPECT_EQ(u2.maxId, 65535);
  auto [x, labels] = u2.batch({1});
  EXPECT_EQ(x.scalar_type(), torch::kInt64);
  EXPECT_EQ(x[0][1].item<std::int64_t>(), 40000);
  const std::vector<std::uint8_t> bytes = {5, 250, 7, 8};
  const data::Dataset pixels = data::loadDataset(
      write("u1.npz", datasetNpz("|u1", bytesOf(bytes), "(2, 2)", "<i8", y, "(2,)")), "", data::Split::Train, 0);
  EXPECT_FALSE(pixels.ids);
  EXPECT_NEAR(pixels.batch({0}).first[0][1].item<float>(), 250 / 255.0, 1e-6);
  const data::Dataset marked = data::loadDataset(
      write("u1ids.npz", datasetNpz("|u1", bytesOf(bytes), "(2, 2)", "<i8", y, "(2,)",
                                    {{"ids.npy", npy("<i8", "()", bytesOf(std::vector<std::int64_t>{1}))}})),
      "", data::Split::Train, 0);
  EXPECT_TRUE(marked.ids);
  EXPECT_EQ(marked.batch({0}).first[0][1].item<std::int64_t>(), 250);
  const std::vector<std::int16_t> negative = {1, -2, 3, 4};
  try {
    data::loadDataset(write("neg.npz", datasetNpz("<i2", bytesOf(negative), "(2, 2)", "<i8", y, "(2,)")), "",
                      data::Split::Train, 0);
    ADD_FAILURE() << "a negative id loaded";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("holds the id -2"), std::string::npos) << e.what();
  }
}

// Samples with no values (int64 x of shape (N, 0)) are named with the file, not left to a
// reduction's error.
TEST_F(Npz, SamplesWithNoValuesAreNamed) {
  const std::string y = bytesOf(std::vector<std::int64_t>{0, 1});
  try {
    data::loadDataset(write("empty.npz", datasetNpz("<i8", "", "(2, 0)", "<i8", y, "(2,)")), "", data::Split::Train, 0);
    ADD_FAILURE() << "samples of no values loaded";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("empty.npz: 'x_train' has shape [2, 0]: its samples hold no values"),
              std::string::npos) << e.what();
  }
}

// Labels per position [N, L], of any integer type, with the ignore index as padding: the
// classes are counted without it.
TEST_F(Npz, LabelsPerPositionWithPadding) {
  const std::vector<std::int32_t> x = {1, 2, 3, 4, 5, 6};
  const std::vector<std::int16_t> y = {0, 4, -100, 2, -100, -100};
  const std::string path = write("tags.npz", datasetNpz("<i4", bytesOf(x), "(2, 3)", "<i2", bytesOf(y), "(2, 3)"));
  const data::Dataset d = data::loadDataset(path, "", data::Split::Test, 0);
  EXPECT_EQ(d.classes, 5);
  EXPECT_EQ(testsupport::tensorsOf(d).labels.sizes(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(data::datasetInfo(path).classes, 5);
  data::DataSource other;
  other.name = path;
  other.ignoreIndex = 4;  // now -100 is a label, and a negative one
  EXPECT_THROW(data::loadDataset(other, data::Split::Train), DataError);
}
