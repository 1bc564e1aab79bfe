#include "runtime/loss/Evaluation.h"

#include <torch/torch.h>

#include <cmath>
#include <numeric>

#include "runtime/config/Losses.h"
#include "runtime/loss/Loss.h"

namespace pstrain::loss {

namespace {

// One batch's output (its logits where a model of its own loss returned them beside it, else
// undefined) and its loss summed over its targets, with the targets counted.
struct Scored {
  at::Tensor output;
  double lossSum = 0;
  std::int64_t targets = 0;
};

Scored score(models::Net& model, const std::string& loss, const at::Tensor& samples, const at::Tensor& labels,
             const data::Dataset& test, c10::Device device) {
  Scored s;
  // Float targets count per sample (mse averages over a sample's elements), labels unless ignored.
  s.targets = test.classes == 0 ? labels.size(0) : labels.ne(test.ignoreIndex).sum().item<std::int64_t>();
  if (config::lossInfo(loss).own) {  // its mean over the batch's targets
    const models::OwnLoss own = model.forwardWithTargets(samples.to(device), labels.to(device));
    s.lossSum = own.loss.item<double>() * static_cast<double>(s.targets);
    if (own.logits.defined()) s.output = own.logits.to(torch::kCPU);
    return s;
  }
  s.output = model.forward(samples.to(device)).to(torch::kCPU);
  s.lossSum = lossOf(loss, s.output, labels, test.ignoreIndex, /*sum=*/true).item<double>();
  if (test.classes == 0) s.lossSum *= static_cast<double>(labels.size(0)) / static_cast<double>(labels.numel());
  return s;
}

}  // namespace

EvalResult evaluate(models::Net& model, const data::Dataset& test, c10::Device device, const std::string& loss,
                    std::int64_t batchSize) {
  torch::NoGradGuard noGrad;
  model.eval();
  EvalResult result;
  result.samples = test.size();
  std::vector<std::int64_t> correct(test.classes, 0), seen(test.classes, 0);
  std::int64_t positionsCorrect = 0;
  bool perPosition = false, scored = test.classes > 0;  // scored: every batch's output held logits
  double lossSum = 0;
  for (std::int64_t first = 0; first < test.size(); first += batchSize) {
    std::vector<std::int64_t> indices(std::min(batchSize, test.size() - first));
    std::iota(indices.begin(), indices.end(), first);
    auto [samples, labels] = test.batch(indices);
    const Scored batch = score(model, loss, samples, labels, test, device);
    lossSum += batch.lossSum;
    result.targets += batch.targets;
    perPosition = perPosition || (test.classes > 0 && labels.dim() > 1);
    scored = scored && batch.output.defined();
    if (!scored) continue;
    const at::Tensor counted = labels.ne(test.ignoreIndex);
    const at::Tensor predicted = batch.output.argmax(-1);
    if (labels.dim() > 1) {
      positionsCorrect += predicted.eq(labels).logical_and_(counted).sum().item<std::int64_t>();
      continue;
    }
    auto* p = predicted.data_ptr<std::int64_t>();
    auto* l = labels.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < indices.size(); ++i) {
      result.predictions.push_back(p[i]);
      if (l[i] == test.ignoreIndex) continue;
      seen[l[i]] += 1;
      correct[l[i]] += p[i] == l[i];
    }
  }
  const double targets = static_cast<double>(std::max<std::int64_t>(1, result.targets));
  result.loss = lossSum / targets;
  if (scored) {
    const std::int64_t right =
        perPosition ? positionsCorrect : std::accumulate(correct.begin(), correct.end(), std::int64_t(0));
    result.accuracy = static_cast<double>(right) / targets;
  }
  if (perPosition) {
    result.perplexity = std::exp(result.loss);
    result.predictions.clear();
  } else if (scored) {
    for (int c = 0; c < test.classes; ++c) {
      result.classAccuracy.push_back(seen[c] ? static_cast<double>(correct[c]) / seen[c]
                                             : std::numeric_limits<double>::quiet_NaN());
    }
  } else {
    result.predictions.clear();
  }
  model.train();
  return result;
}

}  // namespace pstrain::loss
