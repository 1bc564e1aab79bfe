#pragma once
// Files of weights that come from elsewhere or go elsewhere: pretrained weights in
// (pstrain --init-from), trained ones out (pseval --export), by the names of the model's
// state_dict(). Two formats: PyTorch's torch.save of a state dict (a zip archive), and
// safetensors (Safetensors.h: what Hugging Face, MLX and mlx-lm read and write). Read by
// pstrain's own checks only: the archive through zip::checkArchive and
// zip::readWeightsPickle, which make what torch.load(weights_only=True) makes and run no
// pickle code; safetensors by its spec.
#include <string>
#include <string_view>

#include "runtime/checkpoint/Checkpoint.h"

namespace pstrain::checkpoint {

struct WeightsFile {
  TensorList tensors;    // by name, in the file's order, on the CPU, in the file's dtypes
  std::string identity;  // "crc32 XXXXXXXX, N bytes": what every rank compares
};

// The tensors of `path` (a regular file): a .safetensors file's, or torch.save's archive of
// a state dict, or of a dict holding one under "model" or "state_dict" (nanoGPT's ckpt.pt,
// PyTorch Lightning's checkpoints, pstrain's own); torch.compile's "_orig_mod." prefix is
// taken off every name. Throws ConfigError naming the file and what is wrong with it.
WeightsFile readWeightsFile(const std::string& path);

// The same of `bytes` (the fuzzers'), `path` naming them in messages.
TensorList readWeights(std::string_view bytes, const std::string& path);

// Writes `tensors` to `path` atomically: for a path ending in .safetensors by its spec, each
// tensor once, every further name of a tensor written already (a tie) in __metadata__ as
// "NAME": "NAME WRITTEN" (as Hugging Face's writer leaves a tie's copy out); else as
// torch.save's state dict (writeStateDict: a tie's names sharing one storage). Float,
// half, bfloat16, integer and bool tensors. Throws CheckpointError on a failed write.
void writeWeightsFile(const std::string& path, const TensorList& tensors);

}  // namespace pstrain::checkpoint
