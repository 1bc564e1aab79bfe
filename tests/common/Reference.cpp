#include "tests/common/Reference.h"

#include <torch/torch.h>

#include <map>
#include <stdexcept>

#include "data/ShardSampler.h"
#include "runtime/optim/LrSchedule.h"

namespace pstrain::testsupport {

void trainReference(models::Net& model, const data::Dataset& train, const config::TrainConfig& cfg,
                    int workers, std::int64_t steps) {
  const int shards = cfg.virtualShards > 0 ? cfg.virtualShards : workers;
  data::ShardSampler sampler(train.size(), shards, cfg.batchSize, cfg.seed);
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(cfg.lr)
                                                .momentum(cfg.momentum)
                                                .nesterov(cfg.nesterov)
                                                .weight_decay(cfg.weightDecay));
  model.train();
  for (std::int64_t step = 0; step < steps; ++step) {
    std::vector<std::int64_t> indices;
    for (int w = 0; w < shards; ++w) {
      auto part = sampler.batch(w, step);
      indices.insert(indices.end(), part.begin(), part.end());
    }
    auto [images, labels] = train.batch(indices);
    for (auto& group : sgd.param_groups()) {
      group.options().set_lr(optim::learningRate(cfg, shards, step, steps));
    }
    sgd.zero_grad();
    torch::nll_loss(model.forward(images), labels).backward();
    sgd.step();
  }
}

double maxAbsDiff(const checkpoint::TensorList& a, const checkpoint::TensorList& b) {
  std::map<std::string, at::Tensor> right(b.begin(), b.end());
  if (a.size() != b.size()) throw std::runtime_error("state dicts differ in size");
  double worst = 0;
  for (const auto& [key, tensor] : a) {
    auto it = right.find(key);
    if (it == right.end()) throw std::runtime_error("missing key " + key);
    worst = std::max(worst, (tensor - it->second).abs().max().item<double>());
  }
  return worst;
}

checkpoint::TensorList cloneState(const checkpoint::TensorList& state) {
  checkpoint::TensorList copy;
  for (const auto& [key, tensor] : state) copy.emplace_back(key, tensor.detach().clone());
  return copy;
}

config::TrainConfig smallSyntheticConfig(const std::string& trainDir) {
  config::TrainConfig cfg;
  cfg.model = "lenet";
  cfg.dataset = "synthetic";
  cfg.syntheticSize = 600;
  cfg.batchSize = 16;
  cfg.lr = 0.02;
  cfg.lrScaling = "linear";
  cfg.warmupSteps = 5;
  cfg.lrDecay = "cosine";
  cfg.momentum = 0.9;
  cfg.weightDecay = 1e-4;
  cfg.steps = 20;
  cfg.checkpointEvery = 10;
  cfg.logEvery = 10;
  cfg.trainDir = trainDir;
  cfg.overwrite = true;
  cfg.timeoutSeconds = 60;
  return cfg;
}

}  // namespace pstrain::testsupport
