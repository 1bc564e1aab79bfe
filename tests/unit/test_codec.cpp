// Round trips of every codec, the frame's integrity checks, and error feedback.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "runtime/Errors.h"
#include "runtime/codec/Codec.h"
#include "runtime/config/Codecs.h"

using namespace pstrain;

namespace {

// A lenet-like set of tensors: matrices, conv kernels, biases.
const codec::Shapes kShapes = {{6, 1, 5, 5}, {6}, {16, 6, 5, 5}, {16}, {120, 256}, {120}, {84, 120}, {84}, {10, 84}, {10}};

std::size_t total() {
  std::size_t n = 0;
  for (const auto& s : kShapes) {
    std::size_t e = 1;
    for (auto d : s) e *= d;
    n += e;
  }
  return n;
}

std::vector<float> gradientLike(std::uint64_t seed) {
  torch::manual_seed(seed);
  at::Tensor g = torch::randn({static_cast<std::int64_t>(total())}) * 0.01;
  return std::vector<float>(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
}

std::vector<float> roundTrip(codec::Codec& c, const std::vector<float>& values, std::string* payload = nullptr) {
  std::string frame;
  c.encode(values.data(), frame);
  EXPECT_LE(frame.size(), c.maxFrameBytes()) << c.spec();
  std::vector<float> out(values.size(), -1.0f);
  c.decode(frame.data(), frame.size(), out.data());
  if (payload) *payload = frame;
  return out;
}

double maxAbsError(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

}  // namespace

TEST(Codec, NoneAndZlibAreExact) {
  auto g = gradientLike(1);
  for (const char* spec : {"none", "zlib", "zlib:1", "zlib:9"}) {
    auto c = codec::makeCodec(spec, kShapes, 1);
    EXPECT_EQ(roundTrip(*c, g), g) << spec;
  }
}

TEST(Codec, HalfPrecisionAndInt8ErrorsAreBounded) {
  auto g = gradientLike(2);
  float maxAbs = 0;
  for (float v : g) maxAbs = std::max(maxAbs, std::abs(v));
  struct Bound {
    const char* spec;
    double relative;  // of each value (fp16, bf16) or absolute in units of the tensor's max (int8)
  };
  for (auto [spec, bound] : {Bound{"fp16", 1.0 / 2048}, Bound{"bf16", 1.0 / 256}}) {
    auto c = codec::makeCodec(spec, kShapes, 1);
    auto out = roundTrip(*c, g);
    for (std::size_t i = 0; i < g.size(); ++i) {
      // fp16 loses relative precision only above its subnormal range (6e-5).
      ASSERT_LE(std::abs(out[i] - g[i]), bound * std::abs(g[i]) + 6e-8) << spec << " at " << i;
    }
  }
  auto int8 = codec::makeCodec("int8", kShapes, 1);
  auto out = roundTrip(*int8, g);
  EXPECT_LE(maxAbsError(out, g), 0.5 * maxAbs / 127 + 1e-9);  // half a quantisation step of the largest tensor
  EXPECT_GT(maxAbsError(out, g), 0.0);                         // it is lossy: the test can tell
}

TEST(Codec, TopkKeepsExactlyTheKLargest) {
  auto g = gradientLike(3);
  auto c = codec::makeCodec("topk:0.01", kShapes, 1);
  auto out = roundTrip(*c, g);
  const std::size_t k = static_cast<std::size_t>(std::llround(0.01 * g.size()));
  std::vector<float> magnitudes;
  for (float v : g) magnitudes.push_back(std::abs(v));
  std::nth_element(magnitudes.begin(), magnitudes.begin() + (k - 1), magnitudes.end(), std::greater<>());
  const float threshold = magnitudes[k - 1];
  std::size_t kept = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (out[i] != 0) {
      ++kept;
      EXPECT_EQ(out[i], g[i]);               // values travel exactly
      EXPECT_GE(std::abs(g[i]), threshold);  // and only the largest
    } else {
      EXPECT_LE(std::abs(g[i]), threshold);
    }
  }
  EXPECT_EQ(kept, k);
}

TEST(Codec, RandomkUnderErrorFeedbackIsNotRescaled) {
  std::vector<float> ones(total(), 1.0f);
  auto c = codec::makeCodec("randomk:0.1", kShapes, 7, "compress", true);
  std::size_t kept = 0;
  for (float v : roundTrip(*c, ones)) {
    ASSERT_TRUE(v == 0.0f || v == 1.0f);
    kept += v == 1.0f;
  }
  EXPECT_EQ(kept, static_cast<std::size_t>(std::llround(0.1 * ones.size())));  // its share, each as it was
}

TEST(Codec, RandomkIsUnbiasedAndScaled) {
  std::vector<float> ones(total(), 1.0f);
  auto c = codec::makeCodec("randomk:0.1", kShapes, 7);
  std::vector<double> sum(ones.size(), 0.0);
  const int rounds = 200;
  for (int r = 0; r < rounds; ++r) {
    auto out = roundTrip(*c, ones);
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      sum[i] += out[i];
      if (out[i] != 0) {
        ++nonzero;
        EXPECT_NEAR(out[i], double(ones.size()) / std::llround(0.1 * ones.size()), 1e-3);
      }
    }
    EXPECT_EQ(nonzero, static_cast<std::size_t>(std::llround(0.1 * ones.size())));
  }
  double mean = 0;
  for (double s : sum) mean += s / rounds;
  EXPECT_NEAR(mean / sum.size(), 1.0, 0.01);  // E[decode] = the input
}

TEST(Codec, PowerSgdIsExactOnLowRankMatricesAndRawElsewhere) {
  // A rank-2 gradient for the 120x256 matrix: rank 4 recovers it after one warm-started
  // iteration. Biases (1-D) cannot pay off and travel raw, exactly.
  std::vector<float> g = gradientLike(4);
  std::size_t lowRankAt = 0;
  std::vector<std::pair<std::size_t, std::int64_t>> biases;  // offset, size
  std::size_t offset = 0;
  for (const auto& shape : kShapes) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    if (shape == std::vector<std::int64_t>{120, 256}) {
      lowRankAt = offset;
      torch::manual_seed(4);
      at::Tensor lowRank = torch::randn({120, 2}).mm(torch::randn({2, 256}));
      std::copy(lowRank.data_ptr<float>(), lowRank.data_ptr<float>() + n, g.begin() + offset);
    }
    if (shape.size() == 1) biases.emplace_back(offset, n);
    offset += n;
  }
  auto c = codec::makeCodec("powersgd:4", kShapes, 1);
  roundTrip(*c, g);  // warms Q up
  std::string frame;
  auto out = roundTrip(*c, g, &frame);
  double worst = 0;
  for (std::size_t i = lowRankAt; i < lowRankAt + 120 * 256; ++i) worst = std::max(worst, double(std::abs(out[i] - g[i])));
  EXPECT_LT(worst, 1e-3);
  for (auto [at, n] : biases) {
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out[at + i], g[at + i]);
  }
  EXPECT_LT(frame.size(), g.size() * sizeof(float) / 10);
}

TEST(Codec, GarbledOrMismatchedPayloadsAreErrors) {
  auto g = gradientLike(5);
  auto c = codec::makeCodec("fp16", kShapes, 1);
  std::string frame;
  c->encode(g.data(), frame);
  std::vector<float> out(g.size());
  std::string flipped = frame;
  flipped[frame.size() / 2] ^= 0x10;
  EXPECT_THROW(c->decode(flipped.data(), flipped.size(), out.data()), CodecError);
  EXPECT_THROW(c->decode(frame.data(), frame.size() - 3, out.data()), CodecError);
  auto other = codec::makeCodec("bf16", kShapes, 1);
  EXPECT_THROW(other->decode(frame.data(), frame.size(), out.data()), CodecError);
  codec::Shapes shapes = kShapes;
  shapes[0][0] = 7;
  shapes[2][1] = 7;  // same total size, other shapes
  auto reshaped = codec::makeCodec("fp16", shapes, 1);
  EXPECT_THROW(reshaped->decode(frame.data(), frame.size(), out.data()), CodecError);
}

TEST(Codec, SpecsAreChecked) {
  EXPECT_THROW(config::checkedCodec("topk", false, "compress"), ConfigError);
  EXPECT_THROW(config::checkedCodec("topk:2", false, "compress"), ConfigError);
  EXPECT_THROW(config::checkedCodec("powersgd:0.5", false, "compress"), ConfigError);
  EXPECT_THROW(config::checkedCodec("zlib:12", false, "compress"), ConfigError);
  EXPECT_THROW(config::checkedCodec("gzip", false, "compress"), ConfigError);
  EXPECT_THROW(config::checkedCodec("topk:0.01", true, "compress-weights"), ConfigError);
  EXPECT_NO_THROW(config::checkedCodec("randomk:0.05", false, "compress"));
  EXPECT_NO_THROW(config::checkedCodec("int8", true, "compress-weights"));
}

// Under a codec that rounds (int4, int8) the residual is kept in int8 codes by blocks of 64
// (1.0625 bytes a value): what was sent still sums to the sum of the values (diloco's
// pseudo-gradients: the residual is under a rounding step of each block), up to the
// residual held back and the codes' rounding of it, far under one step.
TEST(Codec, ErrorFeedbackOfARoundingCodecKeepsItsResidualInInt8Codes) {
  const std::size_t n = total();
  for (const char* spec : {"int4", "int8"}) {
    codec::ErrorFeedbackEncoder encoder(codec::makeCodec(spec, kShapes, 1), true);
    EXPECT_EQ(encoder.residualBytes(), 1.0625) << spec;
    std::vector<double> values(n, 0.0), sent(n, 0.0);
    std::vector<float> decoded(n);
    double step = 0;  // the largest magnitude a payload had to carry, over its rounding range
    for (int round = 0; round < 100; ++round) {
      auto g = gradientLike(500 + round);
      for (std::size_t i = 0; i < n; ++i) values[i] += g[i];
      for (float x : g) step = std::max(step, std::fabs(static_cast<double>(x)) / 7);
      std::string frame;
      encoder.encode(g.data(), frame);
      encoder.codec().decode(frame.data(), frame.size(), decoded.data());
      for (std::size_t i = 0; i < n; ++i) sent[i] += decoded[i];
    }
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(values[i] - sent[i] - encoder.residual(i)));
    EXPECT_LT(worst, 0.05 * step) << spec;  // 100 rounds' roundings of a residual under a step
  }
  codec::ErrorFeedbackEncoder sparse(codec::makeCodec("topk:0.01", kShapes, 1), true);
  EXPECT_EQ(sparse.residualBytes(), 4.0);  // a sparsifier's residual sums many values: float32
}

// Over many steps, what error feedback sent sums to the sum of the gradients, up to the
// one residual still held back; without feedback top-k loses most of it.
TEST(Codec, ErrorFeedbackTracksTheSumOfGradients) {
  const std::size_t n = total();
  std::vector<double> gradients(n, 0.0), sentWith(n, 0.0), sentWithout(n, 0.0);
  codec::ErrorFeedbackEncoder with(codec::makeCodec("topk:0.01", kShapes, 1), true);
  codec::ErrorFeedbackEncoder without(codec::makeCodec("topk:0.01", kShapes, 1), false);
  std::vector<float> decoded(n);
  for (int step = 0; step < 300; ++step) {
    auto g = gradientLike(100 + step);
    for (std::size_t i = 0; i < n; ++i) g[i] += 0.002f;  // a consistent direction under the noise
    for (std::size_t i = 0; i < n; ++i) gradients[i] += g[i];
    for (auto* encoder : {&with, &without}) {
      std::string frame;
      encoder->encode(g.data(), frame);
      encoder->codec().decode(frame.data(), frame.size(), decoded.data());
      auto& sent = encoder == &with ? sentWith : sentWithout;
      for (std::size_t i = 0; i < n; ++i) sent[i] += decoded[i];
    }
  }
  double errorWith = 0, errorWithout = 0, norm = 0, heldBack = 0;
  for (std::size_t i = 0; i < n; ++i) {
    errorWith += std::pow(gradients[i] - sentWith[i], 2);
    errorWithout += std::pow(gradients[i] - sentWithout[i], 2);
    norm += gradients[i] * gradients[i];
    heldBack += std::pow(with.residual(i), 2);
  }
  // sum(sent) + residual == sum(gradients), to float rounding.
  EXPECT_NEAR(std::sqrt(errorWith), std::sqrt(heldBack), 1e-3 * std::sqrt(norm));
  EXPECT_LT(std::sqrt(errorWith / norm), 0.2);
  EXPECT_GT(std::sqrt(errorWithout / norm), 0.5);
}
