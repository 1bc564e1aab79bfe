#pragma once
// Servers 1..K-1, whatever the exchange: one loop that serves a range (ServedRange) update by
// update as server 0 says. Between two verdicts the exchange's own way of moving the range's
// messages (a FollowPolicy) takes its gradients in and sends its weights down: lockstep
// (sync's K servers), arrival by arrival (point to point), or along the rounds' chain.
#include <cstdint>

#include "models/Registry.h"
#include "runtime/comm/Communicator.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/ServedRange.h"

namespace pstrain::exchanges {

class FollowPolicy {
 public:
  virtual ~FollowPolicy() = default;
  // After server 0's Start (the range's weights and state in): the first down message.
  // Returns whether the run trains (false: nothing follows).
  virtual bool start(ServedRange& served, const Start& start) = 0;
  // Update `step`'s gradients of the range in, summed into served.update() (or applied part
  // by part, RangeUpdate::updatesOnArrival). Returns false where the run ended instead (no
  // verdict follows; any checkpoint served).
  virtual bool takeIn(ServedRange& served, std::int64_t step) = 0;
  // After the verdict's update (and a checkpoint's offer, when v.gather): the down message of
  // the weights v made (the stop's when !v.train).
  virtual void sendDown(ServedRange& served, const Verdict& v) = 0;
  // The weights a checkpoint takes of the range: as the workers hold them.
  virtual const float* heldWeights(ServedRange& served) { return served.update().weights().data_ptr<float>(); }
};

// Server comm.rank()'s loop: Start from server 0, then for each update its gradients in
// (policy.takeIn), its Partial out and the Verdict back, the verdict's update, a checkpoint's
// offer when v.gather, the down message (policy.sendDown), the checkpoint's ranges served,
// until a verdict says the run stops or the policy says it ended.
void follow(comm::Communicator& comm, ServedRange& served, models::Net& model, FollowPolicy& policy);

}  // namespace pstrain::exchanges
