#pragma once
// The K servers' messages (DESIGN.md, "The step protocol": --servers), the channels that
// sync's range servers (range_servers/) and the point-to-point exchange (point_to_point/) both
// run on. Ranks 0..K-1 are the servers, server k owning key range k (Ranges.h); the others
// are workers. On channels of their own:
//   down  server k -> a worker: range k of the weights in parts of kPartFloats, raw floats
//         in place (bfloat16 to workers that hold such, --precision bf16-weights), or one
//         frame of the weight codec made for range k's tensors (--compress-weights);
//         server 0 -> the worker: the header, then the buffers and shares (downTail);
//   up    a worker -> server k: range k of its gradient, raw in parts of kPartFloats
//         (BytePS's partitions), the last part first (backward's order: each part leaves
//         the worker as soon as backward has made it), or one frame of the gradient codec
//         made for range k's tensors, with error feedback of its own;
//         the worker -> server 0: its buffers and trailer (the tail). Sync sends it after
//         the gradient, on kTailTag; point to point sends it first, on the blocking channel,
//         where server 0 takes whichever worker's comes first: its arrival order is the
//         exchange's (RangesLink::Tail);
//   lead  server k -> server 0: what its range says of the step (Partial); server 0 ->
//         server k: what every server does with it (Verdict), and point to point's word on
//         each arrival (Arrival); at a checkpoint, each server's weights and optimizer state
//         to server 0, which publishes them.
// Server 0 decides alone what needs the whole gradient (skip, clip, stop) from the servers'
// partial sums: one scalar each for the norm, one flag for finiteness. Where nothing needs
// it (TrainConfig::updatesOnArrival), each server applies each part of its range as soon
// as every worker's is in, by the lr and sample count that the Start or the last Verdict
// told it beforehand (StepPlan).
#include <algorithm>
#include <cstdint>

#include "runtime/Parts.h"
#include "runtime/comm/Communicator.h"

namespace pstrain::exchanges {

constexpr int kWeightsTag = comm::Communicator::kFirstFreeTag;
constexpr int kHeadTag = comm::Communicator::kFirstFreeTag + 1;
constexpr int kGradTag = comm::Communicator::kFirstFreeTag + 2;
constexpr int kTailTag = comm::Communicator::kFirstFreeTag + 3;
// A range travels in parts of kPartFloats (runtime/Parts.h's partsOf, partSize): a server
// holds a few per worker, not a range.
// The lead messages use the blocking send() and receive(): small, and one at a time.

}  // namespace pstrain::exchanges
