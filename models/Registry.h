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

// What a model file says of itself beyond TorchScript (its extra/pstrain.json, written by
// tools/model_file.py and tools/hf_model.py): how a pretrained file's names map to its own,
// and the whole record, which checkpoints keep (the exports read it).
struct ModelFacts {
  std::string json;  // the record as the file has it ("": none)
  // transformers' base_model_prefix ("model", "transformer"): a pretrained file of the bare
  // model names its tensors without "<prefix>." (GPT-2's hub file).
  std::string basePrefix;
  // Names of a pretrained file that are left unread, as transformers leaves them ('#' stands
  // for a layer number: GPT-2's "h.#.attn.bias").
  std::vector<std::string> ignored;
};

class Net;
// The part of a model's weights whose values a rank uses, given the model (its shapes).
using WeightsNeeded = std::function<FlatSpan(const Net&)>;

// What a model that computes its own loss (Net::forward(x, y)) gives: its loss, a scalar,
// and its output's logits where it returned them beside the loss (else undefined).
struct OwnLoss {
  at::Tensor loss, logits;
};

// A model. Its parameters() are its *trained* tensors, each once: the flat buffer that every
// exchange, codec and optimizer sees. A model of the user's may also hold *frozen* weights
// (requires_grad false: a LoRA fine-tune's base), which are loaded, moved with the model,
// checkpointed and exported but never trained nor exchanged, and *ties*: a tensor under
// several names (GPT-2's lm_head.weight is transformer.wte.weight), one trained slot whose
// uses autograd sums. Every name appears in stateDict(), as PyTorch's state_dict() has it.
class Net : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  // A model whose forward takes the targets too and returns its own loss (nanoGPT's
  // forward(idx, targets) -> (logits, loss)): --loss auto and --loss model train with it.
  virtual bool computesOwnLoss() const { return false; }
  // Its forward(input, target); throws Error saying what its forward returned when that holds
  // no one loss. Only where computesOwnLoss().
  virtual OwnLoss forwardWithTargets(const at::Tensor& input, const at::Tensor& target);
  // What its forward declares, for messages: "forward(Tensor idx, Tensor targets) -> (Tensor,
  // Tensor)"; "" for the zoo's.
  virtual std::string forwardSignature() const { return {}; }
  // The frozen weights by state_dict name, in the module's order (none in the zoo).
  virtual std::vector<std::pair<std::string, at::Tensor>> frozen() const { return {}; }
  // Each further name of a tied tensor, with the name it has among parameters() or frozen().
  virtual std::vector<std::pair<std::string, std::string>> ties() const { return {}; }
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
  // The facts its file gives (none for the zoo's).
  virtual const ModelFacts& facts() const;
  // Its tensors that its file holds no values for (tools/hf_model.py writes a hub model's
  // architecture, each base tensor a placeholder), by their first names: --init-from must
  // give every one of them.
  virtual std::vector<std::string> unfilled() const { return {}; }
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

// The trained parameters' elements (the flat buffer's size).
std::int64_t parameterCount(const torch::nn::Module& module);
// The frozen weights' elements.
std::int64_t frozenCount(const Net& model);
// "15616 parameters"; with frozen weights or ties: "768 trained parameters, 15616 frozen,
// lm_head.weight tied to transformer.wte.weight" (the announcement, the dry run).
std::string describeParameters(const Net& model);

}  // namespace pstrain::models
