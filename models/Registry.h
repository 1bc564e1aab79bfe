#pragma once
// The model zoo. Every model maps a normalised image batch [N, C, H, W] to log-probabilities
// [N, classes] and has the same state_dict keys and shapes as the PyTorch module of the same
// name in tools/pstrain_models.py, so trained weights load into plain PyTorch.
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pstrain::models {

// [begin, end) of the flat parameter vector (protocol/FlatParameters.h's layout: the
// parameters in parameters() order, back to back); by default all of it.
struct FlatSpan {
  std::int64_t begin = 0, end = std::numeric_limits<std::int64_t>::max();
};

class Net;
// The part of a model's weights whose values a rank uses, given the model (its shapes).
using WeightsNeeded = std::function<FlatSpan(const Net&)>;

class Net : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  // A model from a TorchScript file (ScriptModel.h): writes the module with its current
  // weights to `out`, as torch.jit.load reads it, and returns true; and "crc32 ..., N bytes"
  // of the file it came from. False (nothing written) and empty for the zoo's models.
  virtual bool saveTorchScript(std::ostream& /*out*/) const { return false; }
  virtual std::string fileIdentity() const { return {}; }
  // The weights whose values it holds: all of them, but for a model file made with a
  // WeightsNeeded, whose parameters wholly outside that were never read from the file: they
  // hold no values (their memory, never written, takes none where its pages are fresh), and
  // nothing may read them (FlatParameters.h's bindParameters copies none of them).
  virtual FlatSpan heldWeights() const { return {}; }
};


struct ModelInfo {
  std::string name;
  std::string description;
  std::vector<std::int64_t> inputShape;  // C, H, W
};

std::vector<ModelInfo> modelList();

// Throws ConfigError listing the known names.
const ModelInfo& modelInfo(const std::string& name);

// A freshly initialised zoo model with `classes` outputs (from torch's global generator:
// seed it first for reproducible weights), or the model of a TorchScript file, with its
// weights (config::isModelFile; `classes` is then the file's business). Throws ConfigError listing
// the known names, or naming the file and what is wrong with it. `needed` (empty: all)
// spares a model file's reader the values of the weights a rank never uses.
std::shared_ptr<Net> makeModel(const std::string& name, int classes = 10, const WeightsNeeded& needed = {});

// Parameters and buffers by their state_dict key, in registration order.
std::vector<std::pair<std::string, at::Tensor>> stateDict(const torch::nn::Module& module);

std::int64_t parameterCount(const torch::nn::Module& module);

// "conv1.weight:20x1x5x5,conv1.bias:20,..." — compared across ranks at start-up.
std::string parameterSignature(const torch::nn::Module& module);

}  // namespace pstrain::models

namespace pstrain::models {

// Copies `state` into `module`'s parameters and buffers. Throws CheckpointError, naming
// `source`, unless keys and shapes match exactly (a checkpoint of another model, say).
void loadStateDict(torch::nn::Module& module,
                   const std::vector<std::pair<std::string, at::Tensor>>& state,
                   const std::string& source);

}  // namespace pstrain::models
