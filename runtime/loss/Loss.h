#pragma once
// The training loss (--loss), in one place for the workers, the evaluator and the start-up
// check of a model against its data.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "data/Dataset.h"
#include "models/Registry.h"

namespace pstrain::loss {

// `loss` (a row of config/Losses.h: "cross-entropy" on logits, "nll" on log-probabilities,
// "mse" against float targets) of `output` for `target`, the mean (over the targets not equal to `ignoreIndex`
// for the class losses; over every element for mse, as nn.MSELoss), or the sum with `sum`.
// Class targets [B] meet an output [B, C]; targets [B, L] (one per position) an output
// [B, L, C], as F.cross_entropy(output.flatten(0, -2), target.flatten(), ignore_index=...)
// computes it. A [B, 1] output of mse meets [B] targets.
at::Tensor lossOf(const std::string& loss, const at::Tensor& output, const at::Tensor& target,
                  std::int64_t ignoreIndex = -100, bool sum = false);

// The mean loss of `model` on a batch, as training takes it: --loss `loss` (a row's name) of
// model.forward(input), or with config::kModelLoss the model's own (forwardWithTargets).
at::Tensor batchLoss(models::Net& model, const std::string& loss, const at::Tensor& input, const at::Tensor& target,
                     std::int64_t ignoreIndex = -100);

// The loss a run trains `model` (the model of --model `modelName`) with, --loss `loss`
// resolved (config::RunPlan::resolvedLoss): config::kModelLoss for a model that computes its
// own loss, given --loss auto or model; else auto's `byTargets` where the data says so (mse
// for a file's float targets: launcher/Cli), else config::defaultLoss; else `loss`. Throws
// ConfigError for --loss model of a model that computes none, and for any other --loss of
// one that does.
std::string lossForModel(const std::string& loss, const std::string& byTargets, const models::Net& model,
                         const std::string& modelName);

// One forward and backward of `model` (on `device`, in eval mode, so that no BatchNorm
// statistic moves) on two samples of `data`: throws ConfigError naming `modelName`, the
// dataset and both shapes when the forward fails, or when its output does not fit the loss
// (classes for cross-entropy and nll, the targets' shape for mse). Token ids: the first
// sample's first id is the data's largest, so that an id the model's embedding cannot take
// fails here, and the output's classes C (the vocabulary) must exceed every id and target.
// Leaves no gradient behind.
void checkModelFitsData(models::Net& model, const std::string& modelName, const data::Dataset& data,
                        const std::string& loss, c10::Device device);

}  // namespace pstrain::loss
