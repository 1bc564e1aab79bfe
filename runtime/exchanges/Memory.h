#pragma once
// What an exchange's ranks hold that the dry run does not allocate, in bytes a parameter, for
// the memory plan (training/MemoryPlan.h): each exchange's row says its own
// (Exchange::memory), following what its loops keep; change it with them. Torch-free.
#include "runtime/config/Layout.h"
#include "runtime/config/MemoryPolicy.h"
#include "runtime/config/RunPlan.h"

namespace pstrain::exchanges {

struct Memory {
  // A computing rank: its weights as it holds them, and the whole gradient where it keeps one
  // through the step (no stream of buckets; the local rounds' gradient lives from backward to
  // the step only, in the measured step).
  double held = 4;
  // A computing rank beyond its weights and one measured step: a codec's residual, a peer's
  // optimizer state, the local rounds' inner state, global copy and residual.
  double worker = 0;
  // A worker whose rounds overlap their exchanges (the local rounds): the round's base and
  // the pseudo-gradient beside the local weights. In `worker` with --overlap-rounds on; with
  // auto, here alone (the run decides).
  double ifOverlapped = 0;
  // A server, per parameter of its range beyond its weights as loaded: the optimizer's state,
  // the summed gradient where it keeps one, the bfloat16 weights it sends from a copy, the
  // local rounds' frames and copy.
  double server = 0;
  // Whether server 0 holds the whole model but state for its range only (the local rounds
  // with K > 1 servers: its chain sends the whole weights), and then, per parameter beyond
  // its range, the copy the workers hold (a lossy down codec).
  bool leadHoldsAll = false;
  double leadCopy = 0;
  // A server that takes raw parts of its range into receive slots (ServedRange): from how
  // many workers at once, beside those whose parts land in its sum (sync's K servers: every
  // worker but the first, or all when it updates each part; point to point: one). The plan
  // counts the slots as the memory policy gives them (config::MemoryPolicy::receiveSlots).
  int slottedWorkers = 0;
  // A computing rank under --memory fast: the gradient buffer that a streamed (lean) step
  // gives back bucket by bucket, and that fast keeps whole: bytes a parameter beyond the
  // measured step (which is measured lean: roles::measureStep).
  double keptGradient = 0;
};

// A streaming computing rank's figures under cfg's --memory: lean, the buckets in flight
// (counted by the plan); fast, the whole gradient buffer kept (4 bytes a parameter, in
// `held` and `keptGradient`). `streams`: whether its gradient leaves it by buckets.
void addGradientBuffer(Memory& m, const config::RunPlan& cfg, bool streams);
// Bytes a parameter of `rule`'s state (torch.optim's moments; SGD's momentum only with it).
double stateBytes(const config::TrainConfig& rule);
// The gradient codec's residual on the rank that encodes (int8 codes under a codec that
// rounds, else float32), where error feedback is on.
double residualBytes(const config::TrainConfig& cfg);
// The weights as a computing rank holds them: bfloat16 (--precision bf16-weights) or float32.
double weightBytes(const config::TrainConfig& cfg);
// A server of a range that decodes coded gradients (ServedRange): the decoded range and the
// two frames it takes them in; 0 without a gradient codec.
double decodingBytes(const config::TrainConfig& cfg);

}  // namespace pstrain::exchanges
