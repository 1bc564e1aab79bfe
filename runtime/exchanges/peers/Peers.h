#pragma once
// The peer exchanges (allreduce, gossip): no server role, every rank trains on shard `rank`
// of `size`; rank 0 also leaves the run's files (metrics, checkpoints of its model,
// trained_model.pt).
//   allreduce: each step every rank's up message (StepProtocol.h) is summed with
//              MPI_Allreduce and every rank applies the same update to its copy of the
//              weights, so the copies stay equal and equal the sync mode's weights.
//   gossip:    each rank takes SGD steps on its own; after a batch, with
//              --fetch-probability, it reads a random peer's weights, clock (samples
//              trained) and loss from that peer's one-sided window (the peer does not take
//              part) and moves toward them: params = f * peer + (1 - f) * params (Blot et
//              al. 2016, "Gossip training for deep learning"; the dpwa scheme of Daily et
//              al. 2018). f comes from --interpolation, damped by --divergence-threshold;
//              a peer whose read took longer than --peer-timeout-ms is picked less often.
#include "runtime/exchanges/Exchange.h"

namespace pstrain::exchanges {

// Every rank runs the same loop. Rank 0's args.model holds the starting weights (resumed
// from args.resume when not null, on rank 0 only); every rank starts from them. On return
// every rank's model holds its final weights.
extern const Exchange kAllReduce;
extern const Exchange kGossip;

}  // namespace pstrain::exchanges
