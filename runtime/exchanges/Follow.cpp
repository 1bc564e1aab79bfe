#include "runtime/exchanges/Follow.h"

#include <fmt/format.h>

#include "runtime/Stop.h"
#include "runtime/exchanges/CheckpointGather.h"

namespace pstrain::exchanges {

void follow(comm::Communicator& comm, ServedRange& served, models::Net& model, FollowPolicy& policy) {
  const Start start = receiveStart(comm, served.update(), model);
  if (!policy.start(served, start)) return;
  for (std::int64_t step = start.firstStep;; ++step) {
    currentStep() = step;
    if (!policy.takeIn(served, step)) return;
    const std::string context = fmt::format("step {}", step);
    const Verdict v = receiveVerdict(comm, served.partial(), context);
    applyVerdict(served.update(), v, static_cast<std::int64_t>(v.step), comm.rank());
    if (v.gather) offerCheckpoint(comm, served.update(), context);
    policy.sendDown(served, v);
    if (v.gather) serveCheckpoint(comm, policy.heldWeights(served), served.update(), context);
    if (!v.train) return;
  }
}

}  // namespace pstrain::exchanges
