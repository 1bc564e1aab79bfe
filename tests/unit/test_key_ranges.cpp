// --servers' key ranges (exchanges/Ranges.h): contiguous, balanced by bytes, cut
// between tensors where that is near enough the even cut, else inside one.
#include <gtest/gtest.h>

#include "runtime/Errors.h"
#include "runtime/exchanges/Ranges.h"

using pstrain::exchanges::keyRanges;
using pstrain::exchanges::kCutAlignFloats;

namespace {

// The ranges tile [0, total) in order, and each one's shapes hold exactly its floats.
void expectTiling(const std::vector<pstrain::exchanges::KeyRange>& ranges, std::int64_t total) {
  std::int64_t at = 0;
  for (const auto& r : ranges) {
    EXPECT_EQ(r.begin, at);
    EXPECT_GT(r.size(), 0);
    std::int64_t floats = 0;
    for (const auto& shape : r.shapes) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      floats += n;
    }
    EXPECT_EQ(floats, r.size());
    at = r.end;
  }
  EXPECT_EQ(at, total);
}

}  // namespace

TEST(KeyRanges, ManySmallTensorsAreCutBetweenTensors) {
  pstrain::codec::Shapes shapes;
  for (int i = 0; i < 40; ++i) shapes.push_back({64, 100});  // 6400 floats each
  const auto ranges = keyRanges(shapes, 4);
  ASSERT_EQ(ranges.size(), 4u);
  expectTiling(ranges, 40 * 6400);
  for (const auto& r : ranges) {
    EXPECT_EQ(r.size(), 10 * 6400);
    for (const auto& shape : r.shapes) EXPECT_EQ(shape, (std::vector<std::int64_t>{64, 100}));
  }
}

TEST(KeyRanges, ABoundaryWithinAnEighthOfAShareWinsOverAnEvenCut) {
  // 10000 + 9000 + 11000 floats over 2 servers: the even cut is 15000; the boundaries are
  // 5000 and 4000 from it, more than an eighth of a share (1875): the cut falls inside the
  // second tensor, at the multiple of kCutAlignFloats from its start nearest 15000.
  auto ranges = keyRanges({{10000}, {9000}, {11000}}, 2);
  expectTiling(ranges, 30000);
  EXPECT_EQ(ranges[0].end, 10000 + 5 * kCutAlignFloats);
  EXPECT_EQ(ranges[0].shapes, (pstrain::codec::Shapes{{10000}, {5 * kCutAlignFloats}}));
  // 1400 + 1600: the boundary at 1400 is 100 from 1500, within 187: kept whole.
  ranges = keyRanges({{1400}, {1600}}, 2);
  EXPECT_EQ(ranges[0].end, 1400);
  EXPECT_EQ(ranges[0].shapes, (pstrain::codec::Shapes{{1400}}));
}

TEST(KeyRanges, OneBigTensorIsCutInsideAtAlignedOffsets) {
  // An embedding of 50257 x 64 and a few small tensors: cut inside it, each cut a multiple
  // of kCutAlignFloats from its start, the ranges within an alignment of even.
  const pstrain::codec::Shapes shapes{{50257, 64}, {64}, {64, 64}};
  const std::int64_t total = 50257 * 64 + 64 + 64 * 64;
  const auto ranges = keyRanges(shapes, 4);
  expectTiling(ranges, total);
  for (std::size_t k = 0; k + 1 < ranges.size(); ++k) {
    EXPECT_EQ(ranges[k].end % kCutAlignFloats, 0) << k;
    EXPECT_LE(std::llabs(ranges[k].end - total * static_cast<std::int64_t>(k + 1) / 4), kCutAlignFloats) << k;
  }
  EXPECT_EQ(ranges[0].shapes.size(), 1u);  // a 1-D piece of the embedding
  EXPECT_EQ(ranges[0].shapes[0].size(), 1u);
  EXPECT_EQ(ranges[3].shapes.size(), 3u);  // the embedding's last piece, then both small tensors whole
  EXPECT_EQ(ranges[3].shapes[2], (std::vector<std::int64_t>{64, 64}));
}

TEST(KeyRanges, EveryServerGetsAFloatOrTheLayoutIsRefused) {
  const auto ranges = keyRanges({{3}}, 3);
  expectTiling(ranges, 3);
  EXPECT_THROW(keyRanges({{2}}, 3), pstrain::CollectiveConfigError);
}

TEST(KeyRanges, AGradientCodecGetsWholeTensors) {
  // The big tensor would be cut inside; whole tensors cut at the boundary nearest the even
  // cut, and leave a tensor to every later server.
  const auto ranges = keyRanges({{10000}, {9000}, {11000}}, 2, true);
  EXPECT_EQ(ranges[0].end, 19000);
  const auto three = keyRanges({{100000}, {1}, {1}}, 3, true);
  EXPECT_EQ(three[0].end, 100000);
  EXPECT_EQ(three[1].end, 100001);
  EXPECT_THROW(keyRanges({{10}, {10}}, 3, true), pstrain::CollectiveConfigError);
}
