#pragma once
// The sharded exchange's messages (DESIGN.md, "The step protocol": --servers). Ranks
// 0..K-1 are the servers, server k owning key range k (Ranges.h); the others are workers.
// Each step, on channels of their own:
//   down  server k -> every worker: range k of the new weights, raw floats, in place;
//         server 0 -> every worker: the header, then the buffers and shares (downTail);
//   up    every worker -> server k: range k of its gradient (raw, or a frame of the
//         gradient codec made for range k's tensors, with error feedback of its own);
//         every worker -> server 0: its buffers and trailer (the up message after the gradient);
//   lead  server k -> server 0: what its range says of the step (Partial); server 0 ->
//         server k: what every server does with it (Verdict); at a checkpoint, each
//         server's weights and optimizer state to server 0, which publishes them.
// Server 0 decides alone what needs the whole gradient (skip, clip, stop) from the servers'
// partial sums: one scalar each for the norm, one flag for finiteness.
#include <array>
#include <cstdint>

#include "runtime/comm/Communicator.h"

namespace pstrain::exchanges::sharded {

constexpr int kWeightsTag = comm::Communicator::kFirstFreeTag;
constexpr int kHeadTag = comm::Communicator::kFirstFreeTag + 1;
constexpr int kGradTag = comm::Communicator::kFirstFreeTag + 2;
constexpr int kTailTag = comm::Communicator::kFirstFreeTag + 3;
// The lead messages use the blocking send() and receive(): small, and one at a time.

// Server k's word on a step, to server 0.
struct Partial {
  double sumOfSquares = 0;  // of its range of the summed gradient
  double finite = 1;        // 1 when every value of that range is finite
  double updateSeconds = 0; // its last update's
  double bytesOut = 0;      // its link's bytes per step, each way: the weights it sent,
  double bytesIn = 0;       // the gradients it received
  double peakRssMib = 0;
};

// Server 0's word to every server: apply the update (with lr and the gradient's divisor:
// the step's samples over the clipping factor), send a checkpoint's state, and whether the
// next down message trains or stops.
struct Verdict {
  double apply = 0, lr = 0, divisor = 1, gather = 0, train = 0;
  double step = 0;  // the step it is of (the first of a round's), for messages
};

}  // namespace pstrain::exchanges::sharded
