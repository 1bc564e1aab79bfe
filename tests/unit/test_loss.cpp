// The loss (loss/Loss) per sample and per position, its evaluation (loss/Evaluation) and
// the start-up check of a model against its data, for sequence models on token ids.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/Errors.h"
#include "runtime/loss/Evaluation.h"
#include "runtime/loss/Loss.h"

using namespace pstrain;

namespace {

// Ids [B, L] to logits [B, L, classes]: an embedding of `vocab` rows and a linear head.
struct TinyTagger : models::Net {
  TinyTagger(int vocab, int classes) {
    embedding = register_module("embedding", torch::nn::Embedding(vocab, 8));
    head = register_module("head", torch::nn::Linear(8, classes));
  }
  at::Tensor forward(const at::Tensor& ids) override { return head(embedding(ids)); }
  torch::nn::Embedding embedding{nullptr};
  torch::nn::Linear head{nullptr};
};

// 6 sequences of 5 ids below 10, a tag per position (-100: padding).
data::Dataset taggedSequences() {
  torch::manual_seed(0);
  auto samples = std::make_shared<data::TensorSamples>();
  samples->ids = true;
  samples->images = torch::randint(0, 10, {6, 5}, torch::kInt64);
  samples->labels = samples->images.remainder(3);
  samples->labels.index_put_({torch::indexing::Slice(), 4}, -100);
  data::Dataset d;
  d.name = "tagged";
  d.ids = true;
  d.maxId = samples->images.max().item<std::int64_t>();
  d.classes = 3;
  d.samples = samples;
  return d;
}

std::string configErrorOf(models::Net& model, const data::Dataset& d, const std::string& lossName) {
  try {
    loss::checkModelFitsData(model, "tagger.pt", d, lossName, c10::Device(c10::kCPU));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// As F.cross_entropy(out.flatten(0, -2), y.flatten(), ignore_index=-100): the mean over the
// positions that count.
TEST(Loss, CrossEntropyPerPositionSkipsTheIgnoreIndex) {
  torch::manual_seed(1);
  const at::Tensor logits = torch::randn({2, 3, 4});
  const at::Tensor target = torch::tensor({{0, 3, -100}, {2, -100, 1}}, torch::kInt64);
  const at::Tensor logProbabilities = torch::log_softmax(logits, -1);
  double sum = 0;
  int counted = 0;
  for (int b = 0; b < 2; ++b) {
    for (int l = 0; l < 3; ++l) {
      const auto t = target[b][l].item<std::int64_t>();
      if (t == -100) continue;
      sum -= logProbabilities[b][l][t].item<double>();
      ++counted;
    }
  }
  EXPECT_NEAR(loss::lossOf("cross-entropy", logits, target).item<double>(), sum / counted, 1e-6);
  EXPECT_NEAR(loss::lossOf("cross-entropy", logits, target, -100, true).item<double>(), sum, 1e-5);
  EXPECT_NEAR(loss::lossOf("nll", logProbabilities, target).item<double>(), sum / counted, 1e-6);
  // Another ignore index: -100 would be a class, and out of range.
  EXPECT_THROW(loss::lossOf("cross-entropy", logits, target, 3), std::exception);
  EXPECT_THROW(loss::lossOf("cross-entropy", torch::randn({2, 4, 4}), target), Error);  // [2, 4] positions
}

TEST(Loss, EvaluationCountsPositionsAndReportsPerplexity) {
  const data::Dataset d = taggedSequences();
  TinyTagger model(10, 3);
  const loss::EvalResult r = loss::evaluate(model, d, c10::Device(c10::kCPU), "cross-entropy", 4);
  EXPECT_EQ(r.samples, 6);
  EXPECT_EQ(r.targets, 24);  // 6 x 4 positions; the fifth is padding
  const auto [ids, labels] = d.batch({0, 1, 2, 3, 4, 5});
  const at::Tensor logits = model.forward(ids);
  EXPECT_NEAR(r.loss, loss::lossOf("cross-entropy", logits, labels).item<double>(), 1e-5);
  EXPECT_NEAR(r.perplexity, std::exp(r.loss), 1e-9);
  const at::Tensor counted = labels.ne(-100);
  const double right = logits.argmax(-1).eq(labels).logical_and(counted).sum().item<double>();
  EXPECT_DOUBLE_EQ(r.accuracy, right / 24);
  EXPECT_TRUE(r.classAccuracy.empty());
}

TEST(Loss, StartUpCheckCatchesIdsAndOutputsThatDoNotFit) {
  data::Dataset d = taggedSequences();
  TinyTagger fits(10, 3);
  EXPECT_EQ(configErrorOf(fits, d, "cross-entropy"), "");
  TinyTagger smallVocabulary(d.maxId, 3);  // the largest id has no row
  EXPECT_NE(configErrorOf(smallVocabulary, d, "cross-entropy").find("largest is the data's largest id"),
            std::string::npos);
  TinyTagger fewClasses(10, 2);  // a tag of 2 cannot be predicted
  EXPECT_NE(configErrorOf(fewClasses, d, "cross-entropy").find("expected [2, 5, C >= 3]"), std::string::npos)
      << configErrorOf(fewClasses, d, "cross-entropy");
  auto floats = std::make_shared<data::TensorSamples>(dynamic_cast<const data::TensorSamples&>(*d.samples));
  floats->labels = floats->labels.to(torch::kFloat32);
  d.samples = floats;
  d.classes = 0;
  EXPECT_NE(configErrorOf(fits, d, "cross-entropy").find("float targets, not class labels: use --loss mse"),
            std::string::npos);
}
