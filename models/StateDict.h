#pragma once
// A model's tensors by the names of its state_dict(): the names a file of weights gives them
// mapped to the model's (checkpoints, --init-from), and the model's written out. Storage is
// checkpoint/WeightsFile.h's; which tensor a name is, is this file's.
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "models/Registry.h"

namespace pstrain::checkpoint {
class WeightsReader;
}

namespace pstrain::models {

// Every tensor of the model by its state_dict key: the trained parameters, the frozen
// weights, the buffers, then each tie's further names (the same tensor again).
std::vector<std::pair<std::string, at::Tensor>> stateDict(const Net& model);

// "conv1.weight:20x1x5x5,conv1.bias:20,..." over stateDict(): compared across ranks at start-up.
std::string parameterSignature(const Net& model);

// Throws ConfigError, naming `source`, unless `state` has exactly the model's stateDict()
// names and shapes: a checkpoint of another model (say) is refused at once, not taken for
// a damaged file.
void checkStateDictFits(const Net& model, const std::vector<std::pair<std::string, at::Tensor>>& state,
                        const std::string& source);
// Copies `state` into `model`'s tensors (stateDict()'s), after checkStateDictFits.
void loadStateDict(Net& model, const std::vector<std::pair<std::string, at::Tensor>>& state,
                   const std::string& source);

// What --init-from read into a model.
struct Pretrained {
  std::size_t tensors = 0;        // in the file
  std::vector<std::string> kept;  // trained tensors it lacks, which keep the model's values (a fine-tune's adapters)
  // "crc32 XXXXXXXX of its structure and frozen weights, N bytes": what every rank compares
  // (each reads every frozen tensor; the trained ones come from the server).
  std::string identity;
};

// Reads pretrained weights from `file` into `model`, as torchtune's recipes load a
// checkpoint: names and shapes strictly, but a tie needs one of its names (safetensors
// writes a tie once; several given must be equal), and the trained parameters of a model
// with frozen weights (a fine-tune's adapters, which no pretrained file has) may be missing:
// they keep the model's values (but never a tensor its file holds no values for:
// Net::unfilled). The file's names are the model's as transformers maps them: torch.compile's
// "_orig_mod." taken off, a name the model has only under its facts' base prefix given it
// (GPT-2's hub file), the facts' ignored names left unread; a name given twice so (nanoGPT's
// ckpt.pt holding both X and _orig_mod.X) is refused. Names and shapes are checked before any tensor is read, and
// every missing, unexpected, misshapen or unequal name is listed in one ConfigError naming
// `source`. Each tensor is read straight into the model's (converted from the file's type);
// parameters wholly outside model.heldWeights() are not read at all.
Pretrained loadPretrained(Net& model, const checkpoint::WeightsReader& file, const std::string& source);

}  // namespace pstrain::models
