// Parameters, gradients and buffers as views of flat buffers (protocol/FlatParameters).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "models/Registry.h"
#include "models/StateDict.h"
#include "runtime/Errors.h"
#include "runtime/protocol/FlatParameters.h"

using namespace pstrain;

TEST(FlatParameters, BuffersRoundTripThroughAFlatFloatBuffer) {
  auto model = models::makeModel("resnet20");
  model->train();
  model->forward(torch::randn({4, 3, 32, 32}));  // moves the running statistics
  at::Tensor flat = torch::empty({protocol::bufferCount(*model)});
  protocol::readBuffers(*model, flat);
  auto other = models::makeModel("resnet20");
  protocol::writeBuffers(*other, flat);
  auto a = model->named_buffers(), b = other->named_buffers();
  for (const auto& item : a) EXPECT_TRUE(item.value().equal(b[item.key()])) << item.key();
  EXPECT_EQ(b["bn1.num_batches_tracked"].item<std::int64_t>(), 1);
}

TEST(FlatParameters, ParametersAndGradientsLiveInTheFlatBuffers) {
  torch::manual_seed(0);
  auto model = models::makeModel("lenet");
  auto before = models::stateDict(*model)[0].second.clone();
  std::int64_t n = models::parameterCount(*model);
  at::Tensor weights = torch::zeros({n});
  at::Tensor grads = torch::zeros({n});
  protocol::bindParameters(*model, weights);
  protocol::bindGradients(*model, grads);
  EXPECT_TRUE(weights.narrow(0, 0, before.numel()).view(before.sizes()).equal(before));
  weights.fill_(0.5);
  EXPECT_EQ(model->parameters()[3][0].item<float>(), 0.5f);

  weights.normal_();
  auto loss = torch::nll_loss(model->forward(torch::randn({3, 1, 28, 28})), torch::tensor({1, 2, 3}));
  loss.backward();
  protocol::collectGradients(*model, grads);
  EXPECT_GT(grads.abs().sum().item<double>(), 0);
  auto p = model->parameters();
  EXPECT_EQ(p[0].grad().data_ptr(), grads.data_ptr()) << "backward did not accumulate in place";
}

// bindParameters moves a parameter that alone holds its storage (its pages given back as
// they are copied) and copies one whose storage another tensor shares: either way the flat
// buffer holds the values, and the other tensor keeps its own.
TEST(FlatParameters, BindingMovesOnlyWhatNothingElseReads) {
  struct Two : torch::nn::Module {
    at::Tensor alone, shared;
  };
  Two model;
  const at::Tensor big = torch::randn({3 << 20});  // 3 chunks of the move, and some pages
  const at::Tensor storage = torch::randn({1000});
  model.alone = model.register_parameter("alone", big.clone());
  model.shared = model.register_parameter("shared", storage.narrow(0, 0, 500));
  const at::Tensor kept = storage.clone();
  at::Tensor flat = torch::zeros({(3 << 20) + 500});
  protocol::bindParameters(model, flat);
  EXPECT_TRUE(flat.narrow(0, 0, 3 << 20).equal(big));
  EXPECT_TRUE(flat.narrow(0, 3 << 20, 500).equal(kept.narrow(0, 0, 500)));
  EXPECT_TRUE(storage.equal(kept)) << "a tensor sharing a parameter's storage lost its values";
  EXPECT_EQ(model.alone.data_ptr(), flat.data_ptr());
  EXPECT_TRUE(model.alone.equal(big));
}

TEST(FlatParameters, GradientBucketsCutTheBufferBackToFront) {
  auto model = models::makeModel("lenet");
  const std::int64_t n = models::parameterCount(*model);
  auto buckets = protocol::gradientBuckets(*model, 64 * 1024);
  ASSERT_GT(buckets.size(), 2u);
  EXPECT_EQ(buckets.front().end, n);  // the last parameters' gradients come first
  EXPECT_EQ(buckets.back().begin, 0);
  for (std::size_t b = 1; b < buckets.size(); ++b) EXPECT_EQ(buckets[b].end, buckets[b - 1].begin);
  for (std::size_t b = 0; b + 1 < buckets.size(); ++b) EXPECT_EQ((buckets[b].end - buckets[b].begin) * 4, 64 * 1024);
  EXPECT_EQ(buckets.size(), static_cast<std::size_t>((n * 4 + 64 * 1024 - 1) / (64 * 1024)));
  // Each bucket lists exactly the parameters it overlaps, the last ones first: fc1's
  // weight (400,000 elements) spans several buckets.
  auto parameters = model->parameters();
  std::int64_t offset = 0;
  std::vector<std::int64_t> offsets;
  for (const auto& p : parameters) {
    offsets.push_back(offset);
    offset += p.numel();
  }
  for (const auto& b : buckets) {
    std::vector<int> expected;
    for (int i = static_cast<int>(parameters.size()) - 1; i >= 0; --i) {
      if (offsets[i] < b.end && offsets[i] + parameters[i].numel() > b.begin) expected.push_back(i);
    }
    EXPECT_EQ(b.parameters, expected) << "bucket [" << b.begin << ", " << b.end << ")";
  }
  EXPECT_EQ(protocol::gradientBuckets(*model, std::int64_t(1) << 40).size(), 1u);  // one bucket: all of it
}
