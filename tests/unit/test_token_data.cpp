// Token streams for language models (data/TokenFile, data/Dataset, data/ShardSampler): the
// two layouts and their errors, windows and their targets, the random offsets per step and
// shard (the formula scripts redo in Python), the fixed set of val windows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
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
  EXPECT_EQ(train.maxId, 999);
  EXPECT_EQ(train.classes, 1000);
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
