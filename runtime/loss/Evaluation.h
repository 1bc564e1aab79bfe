#pragma once
// Test-set evaluation, shared by pseval and the tests.
#include <c10/core/Device.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "data/Dataset.h"
#include "models/Registry.h"

namespace pstrain::loss {

struct EvalResult {
  std::int64_t samples = 0;
  std::int64_t targets = 0;  // the targets counted: samples, or positions not equal to the ignore index
  double loss = 0;           // the mean of the training loss (--loss) over the targets
  // Class labels only (test.classes > 0); regression targets have loss alone.
  double accuracy = std::numeric_limits<double>::quiet_NaN();    // fraction of the targets correct
  // Targets per position (sequence models): exp(loss), the perplexity. NaN otherwise.
  double perplexity = std::numeric_limits<double>::quiet_NaN();
  // A label per sample only:
  std::vector<double> classAccuracy;      // per label; NaN for a class absent from the set
  std::vector<std::int64_t> predictions;  // argmax per sample, in dataset order
};

// Evaluates `model` (in eval mode, without gradients) on every sample of `test`, with the
// loss `loss` (roles/Loss.h) and the test set's ignore index.
EvalResult evaluate(models::Net& model, const data::Dataset& test, c10::Device device,
                    const std::string& loss = "nll", std::int64_t batchSize = 1000);

}  // namespace pstrain::loss
