#pragma once
// Checkpoints that Python's torch.load reads and that are never seen half-written.
//
// A checkpoint is <dir>/step-NNNNNNNN.pt holding the dict
//   {"model": state_dict,
//    "optimizer": {"momentum_buffer": {key: tensor}} (SGD), or
//                 {"exp_avg": {key: tensor}, "exp_avg_sq": {key: tensor}, "step": N} (Adam, AdamW),
//    "__meta__": {"format": 1, "step", "epoch", "model", "dataset", "synthetic_size",
//                  "fingerprint", "loss", "model_path", "virtual_shards", "batch_size",
//                  "block_size", "ignore_index", "optimizer_rule", "configuration",
//                  "worker_batches" (point to point only), "init_from", "init_from_path",
//                  "model_facts", "ties"}}
// (the meta entries from "loss" on are optional: checkpoints of earlier versions lack them.)
// It is *published* by <dir>/step-NNNNNNNN.ok, written only after the .pt is complete,
// fsync'd and renamed into place; the .ok records the .pt's size and CRC-32 so a reader
// can tell a damaged file from a good one. Readers consider only published checkpoints.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/rundir/RunFiles.h"

namespace pstrain::checkpoint {

using TensorList = std::vector<std::pair<std::string, at::Tensor>>;
// A model's ties: each further name of a tensor, with the name it has first (Net::ties).
using Ties = std::vector<std::pair<std::string, std::string>>;

struct Checkpoint {
  std::int64_t step = 0;   // optimizer steps completed
  std::int64_t epoch = 0;
  std::string model;       // registry name
  std::string dataset;
  std::int64_t syntheticSize = 0;  // training-set size when dataset is "synthetic"
  std::string fingerprint; // config::RunPlan::fingerprint()
  std::string loss = "nll";  // config::RunPlan::lossFunction()
  std::string modelPath;   // a model file's absolute path (empty for the zoo)
  std::int64_t virtualShards = 0;  // of the run's global batch (0: not recorded)
  std::int64_t batchSize = 0;      // per virtual shard (0: not recorded)
  std::int64_t blockSize = 0;      // a token file's window (0: not one)
  std::int64_t ignoreIndex = -100;
  // What the optimizer state belongs to (TrainConfig::updateRuleName(): "update adamw",
  // diloco's "outer sgd"), and the configuration's shared fields as "name=value" lines (for
  // a resume to say which changed). Empty in checkpoints of earlier versions.
  std::string optimizerRule;
  std::string configuration;
  // Point to point (backup, async), where each worker counts its own batches: the batch each
  // computes next, by worker index; empty in other modes and in earlier versions.
  std::vector<std::int64_t> workerBatches;
  // --init-from's identity ("crc32 ... of its structure and frozen weights, N bytes"; empty:
  // none) and its absolute path (the hub folder whose config and tokenizer an export copies).
  std::string initFrom, initFromPath;
  // The model file's facts (models::ModelFacts::json: its family, LoRA, ...; empty: none),
  // what pseval --export --format reads.
  std::string modelFacts;
  // The model's ties ({alias: name}; empty in earlier versions): what an export writes once.
  Ties ties;
  TensorList modelState;   // state_dict, in order
  // The optimizer's state per parameter, by torch.optim's names, and the updates it counted
  // (Adam's step; 0 for SGD); empty before the first update with such state.
  std::vector<std::pair<std::string, TensorList>> optimizerState;
  std::int64_t optimizerSteps = 0;
  // Dynamic loss scaling's state (--loss-scale; absent without), saved as "scaler" in the
  // form of torch.cuda.amp.GradScaler.state_dict(), which its load_state_dict() takes.
  struct LossScale {
    double scale = 0;
    std::int64_t goodSteps = 0;       // GradScaler's _growth_tracker
    std::int64_t growthInterval = 0;
  };
  std::optional<LossScale> lossScale;
};

// Where a written file takes the bytes of memory that does not hold them (a placeholder for
// what another rank holds: K servers' ranges): null, or a function that, for the
// `bytes` bytes at `data` when it has them, gives them to `write` in order, in pieces as it
// likes (so that nothing is put together whole), and returns true; false for memory that
// holds its own. Called once per tensor storage, in the file's order.
using RecordWrite = std::function<void(const void* data, std::size_t bytes)>;
using RecordSource = std::function<bool(const void* data, std::size_t bytes, const RecordWrite& write)>;

// Publishes `ckpt` into `dir` (created if needed) and returns the .pt path.
std::string publish(const std::string& dir, const Checkpoint& ckpt, const RecordSource& source = nullptr);

// Verifies size and CRC against the marker, unpickles and checks the structure.
// Throws CheckpointError naming the file on any problem.
Checkpoint read(const rundir::Published& published);

// Writes an optimizer's state as checkpoints hold it ({name: {key: tensor}, "step": N}),
// atomically: trained_model.optimizer.pt.
void writeOptimizerState(const std::string& path, const Checkpoint& ckpt, const RecordSource& source = nullptr);

// Writes atomically the zip archive that `save` writes to the stream it is given (a model
// file's TorchScript module: Net::saveTorchScript), with the bytes of each tensor storage it
// writes from `stable` memory taken from `source` where that has them: a module whose tensors
// view placeholders is written without being made whole. `stable`: memory that stays valid and
// unchanged until this returns (the module's tensors' storages); what `save` writes from
// anywhere else is copied as it comes. Returns `save`'s answer (false: it had nothing to
// write, and no file is made).
struct MemoryRange {
  const void* data;
  std::size_t bytes;
};
bool writeArchive(const std::string& path, const std::function<bool(std::ostream&)>& save,
                  const std::vector<MemoryRange>& stable, const RecordSource& source);

// Writes a plain state_dict (loadable by module.load_state_dict in PyTorch) atomically.
void writeStateDict(const std::string& path, const TensorList& state, const RecordSource& source = nullptr);
TensorList readStateDict(const std::string& path);

}  // namespace pstrain::checkpoint
