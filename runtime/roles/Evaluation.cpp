#include "runtime/roles/Evaluation.h"

#include <torch/torch.h>

#include "runtime/roles/Loss.h"

#include <limits>
#include <numeric>

namespace pstrain::roles {

EvalResult evaluate(models::Net& model, const data::Dataset& test, c10::Device device, const std::string& loss,
                    std::int64_t batchSize) {
  torch::NoGradGuard noGrad;
  model.eval();
  EvalResult result;
  result.samples = test.size();
  std::vector<std::int64_t> correct(test.classes, 0), seen(test.classes, 0);
  double lossSum = 0;
  for (std::int64_t first = 0; first < test.size(); first += batchSize) {
    std::vector<std::int64_t> indices(std::min(batchSize, test.size() - first));
    std::iota(indices.begin(), indices.end(), first);
    auto [images, labels] = test.batch(indices);
    at::Tensor output = model.forward(images.to(device)).to(torch::kCPU);
    // mse averages over the elements of a sample: the sum of per-sample means.
    const double perSample = loss == "mse" ? static_cast<double>(labels.numel()) / labels.size(0) : 1.0;
    lossSum += lossOf(loss, output, labels, /*sum=*/true).item<double>() / perSample;
    if (test.classes == 0) continue;
    at::Tensor predicted = output.argmax(1);
    auto* p = predicted.data_ptr<std::int64_t>();
    auto* l = labels.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < indices.size(); ++i) {
      result.predictions.push_back(p[i]);
      seen[l[i]] += 1;
      correct[l[i]] += p[i] == l[i];
    }
  }
  std::int64_t totalCorrect = std::accumulate(correct.begin(), correct.end(), std::int64_t(0));
  result.loss = lossSum / test.size();
  result.accuracy = test.classes > 0 ? static_cast<double>(totalCorrect) / test.size()
                                     : std::numeric_limits<double>::quiet_NaN();
  for (int c = 0; c < test.classes; ++c) {
    result.classAccuracy.push_back(seen[c] ? static_cast<double>(correct[c]) / seen[c]
                                           : std::numeric_limits<double>::quiet_NaN());
  }
  model.train();
  return result;
}

}  // namespace pstrain::roles
