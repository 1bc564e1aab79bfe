#include "runtime/exchanges/RangesWorker.h"

#include <fmt/format.h>

#include "runtime/Stop.h"
#include "runtime/comm/Values.h"
#include "runtime/config/Layout.h"
#include "runtime/exchanges/RangesLink.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/LocalTrainer.h"

namespace pstrain::exchanges {

using namespace protocol;

void runRangesWorker(const roles::RoleArgs& args, Pace pace) {
  const config::RunPlan& cfg = args.cfg;
  comm::Communicator& comm = args.comm;
  const config::Layout layout(cfg, comm.size());
  StepMessages messages(models::parameterCount(args.model), bufferCount(args.model), comm.size(), args.device,
                        cfg.bf16Weights());
  roles::LocalTrainer trainer(cfg, args.model, *args.train, args.device, messages, layout.workerIndex(comm.rank()),
                              layout.workers(), comm.rank());
  RangesLink link(comm, cfg, args.model, messages, pace == Pace::Lockstep ? RangesLink::Tail::After : RangesLink::Tail::First);
  std::string context;
  const bool stream = cfg.streamsGradients();  // sync's alone
  if (stream) {
    trainer.streamGradients(link.parts(), [&](const Bucket& part) { link.startPart(part, context); });
  } else if (cfg.bf16Weights()) {  // float32 gradients of bfloat16 weights: through the hooks, then up whole
    trainer.streamGradients(link.parts(), [](const Bucket&) {});
  }
  auto receiveWeights = [&](std::int64_t step) {
    const StepHeader header = link.receiveDown(fmt::format("step {}", step));
    trainer.loadWeights();
    if (cfg.balance()) trainer.assign(roles::shardsOfRank(messages.shares.data_ptr<float>(), comm.size(), comm.rank()));
    return header;
  };
  // Pace::Own's count of its batches, from server 0's word (its count, saved in checkpoints).
  std::int64_t batch = pace == Pace::Own ? pstrain::comm::receiveValue<std::int64_t>(comm, 0, "start") : 0;
  for (StepHeader header = receiveWeights(0); header.control != Control::Stop;) {
    currentStep() = header.step;
    context = fmt::format("step {}", header.step);
    trainer.computeGradient(pace == Pace::Lockstep ? header.step : batch, header.step, header.lossScale);
    if (stream) {
      link.finishUp(context);
    } else {  // coded, or not streamed: the whole gradient, then its parts in the same order
      link.sendUp(context);
    }
    header = receiveWeights(header.step + 1);
    if (header.control == Control::Train) ++batch;  // Retry: the same batch again
  }
}

}  // namespace pstrain::exchanges
