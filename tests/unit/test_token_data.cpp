// Token streams for language models (data/TokenFile, data/Dataset, data/ShardSampler): the
// two layouts and their errors, windows and their targets, the random offsets per step and
// shard (the formula scripts redo in Python), the fixed set of val windows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "data/Dataset.h"
#include "data/ShardSampler.h"
#include "data/TokenFile.h"
#include "runtime/Errors.h"
#include "tests/common/ScratchDir.h"

using namespace pstrain;

namespace {

// Writes ids as little-endian uint16, after llm.c's header when `llmc` (magic, version, count).
void writeTokens(const std::filesystem::path& path, const std::vector<std::uint16_t>& ids, bool llmc = false,
                 std::int32_t magic = 20240520, std::int32_t version = 1) {
  std::ofstream out(path, std::ios::binary);
  if (llmc) {
    std::vector<std::int32_t> header(256, 0);
    header[0] = magic, header[1] = version, header[2] = static_cast<std::int32_t>(ids.size());
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(2 * ids.size()));
}

// Writes an .npy as np.save does: dtype `descr` ("<u2"), shape text `shape` ("(1000,)"),
// then `data`.
void writeNpy(const std::filesystem::path& path, const std::string& descr, const std::string& shape,
              const std::string& data) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out << std::string("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(header.size() & 0xff)).put(static_cast<char>(header.size() >> 8));
  out << header << data;
}

template <typename Id>
std::string idBytes(std::size_t n, Id first) {
  std::string bytes(n * sizeof(Id), '\0');
  for (std::size_t i = 0; i < n; ++i) {
    const Id id = static_cast<Id>(first + i);
    std::memcpy(bytes.data() + i * sizeof(Id), &id, sizeof id);
  }
  return bytes;
}

std::vector<std::uint16_t> iota(std::size_t n, std::uint16_t first = 0) {
  std::vector<std::uint16_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::uint16_t>(first + i);
  return ids;
}

template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TokenFile, ReadsBothLayouts) {
  testsupport::ScratchDir dir("tokens");
  writeTokens(dir / "train.bin", iota(1000, 7));
  writeTokens(dir / "story_train.bin", iota(500, 3), /*llmc=*/true);
  data::TokenFile nano((dir / "train.bin").string()), llmc((dir / "story_train.bin").string());
  EXPECT_EQ(nano.count(), 1000u);
  EXPECT_EQ(nano.maxId(), 1006);
  EXPECT_EQ(llmc.count(), 500u);
  EXPECT_EQ(llmc.maxId(), 502);
  std::vector<std::int64_t> out(4);
  llmc.copy(10, 4, out.data());
  EXPECT_EQ(out, (std::vector<std::int64_t>{13, 14, 15, 16}));
  EXPECT_THROW(llmc.copy(498, 4, out.data()), DataError);
  EXPECT_NE(nano.identity(), llmc.identity());
  EXPECT_EQ(data::validationPath((dir / "train.bin").string()), (dir / "val.bin").string());
  EXPECT_EQ(data::validationPath("/d/train_x/story_train.bin"), "/d/train_x/story_val.bin");
  EXPECT_THROW(data::validationPath("/d/train_x/tokens.bin"), DataError);
}

TEST(TokenFile, BadFilesSayWhatIsWrong) {
  testsupport::ScratchDir dir("bad-tokens");
  {
    std::ofstream odd(dir / "train.bin", std::ios::binary);
    odd << "abc";
  }
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "train.bin").string()); }).find("3 bytes, an odd size"),
            std::string::npos);
  writeTokens(dir / "a_train.bin", iota(10), true, 20240521);
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "a_train.bin").string()); }).find("not an llm.c token file"),
            std::string::npos);
  writeTokens(dir / "b_train.bin", iota(10), true, 20240520, 2);
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "b_train.bin").string()); }).find("version 2"), std::string::npos);
  // A header that claims more tokens than the file holds.
  writeTokens(dir / "c_train.bin", iota(10), true);
  std::filesystem::resize_file(dir / "c_train.bin", 1024 + 8);
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "c_train.bin").string()); }).find("says 10 tokens"), std::string::npos);
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "none.bin").string()); }).find("cannot open"), std::string::npos);
}

// NumPy's .npy of ids is a token file (issue 51: a format is a reader and a row): uint16 and
// uint32, one dimension, its test split NAME_val.npy beside NAME_train.npy; a dataset of it
// takes windows as a .bin's do. Any other .npy is refused, naming what is wrong.
TEST(TokenFile, ReadsNpyArraysOfIds) {
  testsupport::ScratchDir dir("npy-tokens");
  writeNpy(dir / "story_train.npy", "<u2", "(1000,)", idBytes<std::uint16_t>(1000, 7));
  writeNpy(dir / "story_val.npy", "<u2", "(200,)", idBytes<std::uint16_t>(200, 1));
  writeNpy(dir / "wide_train.npy", "<u4", "(300,)", idBytes<std::uint32_t>(300, 70000));
  data::TokenFile narrow((dir / "story_train.npy").string()), wide((dir / "wide_train.npy").string());
  EXPECT_EQ(narrow.count(), 1000u);
  EXPECT_EQ(narrow.maxId(), 1006u);
  EXPECT_STREQ(narrow.idType(), "uint16");
  EXPECT_EQ(wide.count(), 300u);
  EXPECT_EQ(wide.maxId(), 70299u);
  EXPECT_STREQ(wide.idType(), "uint32");
  std::vector<std::int64_t> out(3);
  wide.copy(5, 3, out.data());
  EXPECT_EQ(out, (std::vector<std::int64_t>{70005, 70006, 70007}));
  EXPECT_TRUE(config::isTokenFile((dir / "story_train.npy").string()));
  data::DataSource source{(dir / "story_train.npy").string(), "", 0, 16};
  const data::Dataset train = data::loadDataset(source, data::Split::Train);
  EXPECT_EQ(train.size(), 1000 - 16);
  const auto [x, y] = train.batch({0, 10});
  EXPECT_EQ(x[1][0].item<std::int64_t>(), 17);
  EXPECT_EQ(y[1][0].item<std::int64_t>(), 18);
  EXPECT_EQ(data::loadDataset(source, data::Split::Test).size(), (200 - 1) / 16);

  writeNpy(dir / "float_train.npy", "<f4", "(10,)", idBytes<std::uint32_t>(10, 0));
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "float_train.npy").string()); }).find("dtype '<f4' is not supported"),
            std::string::npos);
  writeNpy(dir / "matrix_train.npy", "<u2", "(5, 2)", idBytes<std::uint16_t>(10, 0));
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "matrix_train.npy").string()); }).find("has one dimension"),
            std::string::npos);
  writeNpy(dir / "short_train.npy", "<u2", "(100,)", idBytes<std::uint16_t>(60, 0));
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "short_train.npy").string()); }).find("holds 120 bytes of ids"),
            std::string::npos);
  std::ofstream(dir / "text_train.npy") << "not numpy at all";
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "text_train.npy").string()); }).find("not a .npy array"),
            std::string::npos);
}

// A FIFO in a token file's place is refused at once, not waited on (its open would wait
// for a writer: pstrain hung until the handshake's timeout named a rank, pseval forever).
// NumPy's magic says what a file is, whatever its name: a .npy renamed train.bin is read as
// the .npy it is (its header is no ids), and one whose header names a key twice (NumPy takes
// the last, a reader of the first would read other ids) is refused.
TEST(TokenFile, ANpyByAnyNameIsReadAsNpyAndItsKeysCountOnce) {
  testsupport::ScratchDir dir("npy-named-bin");
  writeNpy(dir / "train.bin", "<u4", "(250,)", idBytes<std::uint32_t>(250, 70000));
  data::TokenFile renamed((dir / "train.bin").string());
  EXPECT_EQ(renamed.count(), 250u);
  EXPECT_STREQ(renamed.idType(), "uint32");
  writeNpy(dir / "twice_train.npy", "<u2", "(500,), 'descr': '<u4'", idBytes<std::uint16_t>(500, 3));
  const std::string twice = errorOf([&] { data::TokenFile((dir / "twice_train.npy").string()); });
  EXPECT_NE(twice.find("names 'descr' twice"), std::string::npos) << twice;
}

TEST(TokenFile, AFifoIsRefusedAtOnce) {
  testsupport::ScratchDir dir("fifo-tokens");
  const std::string fifo = (dir / "train.bin").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(errorOf([&] { data::TokenFile{fifo}; }).find("not a regular file"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Python's redo of windowDraw gives these (tools/ and the tests' scripts rely on them).
TEST(ShardSampler, WindowDrawsAreTheDocumentedFormula) {
  EXPECT_EQ(data::windowDraw(1, 0, 0, 0, 1000003), 845435);
  EXPECT_EQ(data::windowDraw(1, 0, 0, 1, 1000003), 276618);
  EXPECT_EQ(data::windowDraw(1, 0, 0, 3, 1000003), 636930);
  EXPECT_EQ(data::windowDraw(42, 7, 3, 5, std::int64_t(1) << 40), 635765450506);
}

TEST(ShardSampler, TokenStreamsDrawFullBatchesPerStepAndShard) {
  // 10000 tokens, windows of 10: 9990 offsets; an epoch is 10000 / (10 x 4 shards x 5) = 50 steps.
  data::ShardSampler sampler(9990, 4, 5, 9, 10);
  EXPECT_EQ(sampler.stepsPerEpoch(), 50);
  EXPECT_EQ(sampler.batchSizeAt(49), 5);
  const auto a = sampler.batch(2, 17);
  EXPECT_EQ(a, data::ShardSampler(9990, 4, 5, 9, 10).batch(2, 17));  // whoever computes it
  EXPECT_NE(a, sampler.batch(3, 17));
  EXPECT_NE(a, sampler.batch(2, 18));
  for (std::int64_t offset : a) EXPECT_TRUE(offset >= 0 && offset < 9990);
  EXPECT_EQ(data::ShardSampler(100, 4, 5, 9, 10).stepsPerEpoch(), 1);  // at least one step
}

TEST(TokenDataset, WindowsAndTheirTargets) {
  testsupport::ScratchDir dir("token-dataset");
  writeTokens(dir / "train.bin", iota(1000));
  writeTokens(dir / "val.bin", iota(101, 2000));
  data::DataSource source{(dir / "train.bin").string(), "", 0, 8};
  const data::Dataset train = data::loadDataset(source, data::Split::Train);
  EXPECT_EQ(train.size(), 992);  // offsets 0 .. 991
  EXPECT_TRUE(train.ids);
  // The largest id of both splits: the model's vocabulary must take val.bin's too (2000 + 100).
  EXPECT_EQ(train.maxId, 2100);
  EXPECT_EQ(train.classes, 2101);
  auto [x, y] = train.batch({0, 991});
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{2, 8}));
  EXPECT_EQ(x.scalar_type(), torch::kInt64);
  EXPECT_EQ(x[1][0].item<std::int64_t>(), 991);
  EXPECT_EQ(y[1][7].item<std::int64_t>(), 999);  // the last window's last target: the last token
  EXPECT_TRUE(y.narrow(1, 0, 7).equal(x.narrow(1, 1, 7)));
  // Val: 101 tokens make (101 - 1) / 8 = 12 non-overlapping windows ...
  const data::Dataset all = data::loadDataset(source, data::Split::Test);
  EXPECT_EQ(all.size(), 12);
  EXPECT_EQ(all.batch({11}).first[0][0].item<std::int64_t>(), 2000 + 88);
  // ... or --eval-windows of them spread evenly: the first at 0, the last ending at the end.
  source.evalWindows = 5;
  const data::Dataset some = data::loadDataset(source, data::Split::Test);
  EXPECT_EQ(some.size(), 5);
  EXPECT_EQ(some.batch({4}).second[0][7].item<std::int64_t>(), 2000 + 100);
  source.blockSize = 200;
  EXPECT_NE(errorOf([&] { data::loadDataset(source, data::Split::Train); }).find("val.bin: 101 tokens, too few"),
            std::string::npos);
}

namespace {

// llm.c's version 7: magic 20240801, uint32 ids after the 256-int32 header.
void writeTokens32(const std::filesystem::path& path, const std::vector<std::uint32_t>& ids,
                   std::int32_t version = 7) {
  std::ofstream out(path, std::ios::binary);
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240801, header[1] = version, header[2] = static_cast<std::int32_t>(ids.size());
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(4 * ids.size()));
}

}  // namespace

// LLaMA-3-sized vocabularies: version 7 files are read as uint32, whatever their name, and
// a header pstrain does not know is never read as ids.
TEST(TokenFile, ReadsVersion7AndNeverMisreadsAHeader) {
  testsupport::ScratchDir dir("tokens32");
  std::vector<std::uint32_t> ids(300);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = 128000 + static_cast<std::uint32_t>(i) * 7;
  writeTokens32(dir / "train.bin", ids);  // nanoGPT's name, llm.c's header: llm.c's layout
  writeTokens32(dir / "s_train.bin", ids);
  for (const char* name : {"train.bin", "s_train.bin"}) {
    data::TokenFile file((dir / name).string());
    EXPECT_EQ(file.count(), 300u) << name;
    EXPECT_STREQ(file.idType(), "uint32");
    EXPECT_EQ(file.maxId(), 128000u + 299 * 7);
    std::vector<std::int64_t> out(3);
    file.copy(297, 3, out.data());
    EXPECT_EQ(out, (std::vector<std::int64_t>{128000 + 297 * 7, 128000 + 298 * 7, 128000 + 299 * 7}));
  }
  // An llm.c magic with a version pstrain does not read: named, with what pstrain reads.
  writeTokens32(dir / "v8_train.bin", ids, 8);
  const std::string v8 = errorOf([&] { data::TokenFile((dir / "v8_train.bin").string()); });
  EXPECT_NE(v8.find("magic 20240801) of version 8"), std::string::npos) << v8;
  EXPECT_NE(v8.find("version 7 (uint32 ids)"), std::string::npos) << v8;
  // A header's magic that is no llm.c's in a train.bin: refused, not read as uint16 ids.
  std::filesystem::create_directories(dir / "other");
  writeTokens(dir / "other" / "train.bin", iota(100), true, 20250101, 1);
  const std::string other = errorOf([&] { data::TokenFile((dir / "other" / "train.bin").string()); });
  EXPECT_NE(other.find("a header's magic, not token ids"), std::string::npos) << other;
  // A v7 header on uint16-sized data is a size mismatch, never uint16 ids.
  writeTokens(dir / "short_train.bin", iota(300), true, 20240801, 7);
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "short_train.bin").string()); }).find("says 300 tokens (uint32 ids"),
            std::string::npos);
  // Without "train" in a name that llm.c's magic does not start, the name to use is said.
  writeTokens(dir / "tokens.bin", iota(100), true, 1234, 1);
  EXPECT_NE(errorOf([&] { data::TokenFile((dir / "tokens.bin").string()); }).find("named train.bin"), std::string::npos);
}

// A token file cut short while a rank trains on it (truncate, tools/text_to_bin.py writing
// into the same folder) is a DataError naming it, never a SIGBUS.
TEST(TokenFile, AFileCutShortWhileOpenIsADataError) {
  testsupport::ScratchDir dir("tokens-cut");
  writeTokens(dir / "train.bin", iota(100000));
  data::TokenFile file((dir / "train.bin").string());
  std::filesystem::resize_file(dir / "train.bin", 1000);
  std::vector<std::int64_t> out(64);
  file.copy(10, 64, out.data());  // still there
  EXPECT_EQ(out[0], 10);
  const std::string cut = errorOf([&] { file.copy(90000, 64, out.data()); });
  EXPECT_NE(cut.find("train.bin (changed while training?): truncated"), std::string::npos) << cut;
}
