#include "runtime/loss/Evaluation.h"

#include <torch/torch.h>

#include <cmath>
#include <numeric>

#include "runtime/loss/Loss.h"

namespace pstrain::loss {

EvalResult evaluate(models::Net& model, const data::Dataset& test, c10::Device device, const std::string& loss,
                    std::int64_t batchSize) {
  torch::NoGradGuard noGrad;
  model.eval();
  EvalResult result;
  result.samples = test.size();
  std::vector<std::int64_t> correct(test.classes, 0), seen(test.classes, 0);
  std::int64_t positionsCorrect = 0;
  bool perPosition = false;
  double lossSum = 0;
  for (std::int64_t first = 0; first < test.size(); first += batchSize) {
    std::vector<std::int64_t> indices(std::min(batchSize, test.size() - first));
    std::iota(indices.begin(), indices.end(), first);
    auto [samples, labels] = test.batch(indices);
    at::Tensor output = model.forward(samples.to(device)).to(torch::kCPU);
    if (test.classes == 0) {
      // mse averages over the elements of a sample: the sum of per-sample means.
      lossSum += lossOf(loss, output, labels, test.ignoreIndex, /*sum=*/true).item<double>() * labels.size(0) /
                 static_cast<double>(labels.numel());
      result.targets += labels.size(0);
      continue;
    }
    lossSum += lossOf(loss, output, labels, test.ignoreIndex, /*sum=*/true).item<double>();
    const at::Tensor counted = labels.ne(test.ignoreIndex);
    result.targets += counted.sum().item<std::int64_t>();
    const at::Tensor predicted = output.argmax(-1);
    if (labels.dim() > 1) {
      perPosition = true;
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
  if (test.classes > 0) {
    const std::int64_t right =
        perPosition ? positionsCorrect : std::accumulate(correct.begin(), correct.end(), std::int64_t(0));
    result.accuracy = static_cast<double>(right) / targets;
  }
  if (perPosition) {
    result.perplexity = std::exp(result.loss);
    result.predictions.clear();
  } else {
    for (int c = 0; c < test.classes; ++c) {
      result.classAccuracy.push_back(seen[c] ? static_cast<double>(correct[c]) / seen[c]
                                             : std::numeric_limits<double>::quiet_NaN());
    }
  }
  model.train();
  return result;
}

}  // namespace pstrain::loss
