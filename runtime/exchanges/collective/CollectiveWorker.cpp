// The collective exchange's workers (Collective.h).
#include <fmt/format.h>

#include "runtime/Stop.h"
#include "runtime/config/Layout.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepLink.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/LocalTrainer.h"
#include "runtime/roles/RoleArgs.h"

namespace pstrain::exchanges::collective {

using namespace protocol;
using roles::LocalTrainer;
using roles::shardsOfRank;

// Ranks 1..N: receive the step's weights (broadcast), compute the gradient on the step's
// batch of this worker's virtual shards, sum it into rank 0's (reduce); until rank 0 says
// stop. Where the run streams, the gradient goes up bucket by bucket from inside backward,
// and with updates on arrival the weights come back the same way.
void work(const roles::RoleArgs& args) {
  const config::RunPlan& cfg = args.cfg;
  comm::Communicator& comm = args.comm;
  StepMessages messages(models::parameterCount(args.model), bufferCount(args.model), comm.size(), args.device,
                        cfg.bf16Weights());
  const config::Layout layout(cfg, comm.size());
  LocalTrainer trainer(cfg, args.model, *args.train, args.device, messages, layout.workerIndex(comm.rank()),
                       layout.workers(), comm.rank());
  StepLink link(comm, cfg, args.model, messages, cfg.seed * 7919u + static_cast<std::uint64_t>(comm.rank()));
  auto useWeights = [&] {
    trainer.loadWeights();
    if (cfg.balance()) trainer.assign(shardsOfRank(messages.shares.data_ptr<float>(), comm.size(), comm.rank()));
    return messages.header();
  };
  auto receiveWeights = [&](std::int64_t expected) {
    link.broadcastDown(fmt::format("step {}", expected));
    return useWeights();
  };
  std::string context;
  const bool stream = cfg.streamsGradients(), overlap = cfg.updatesOnArrival();
  if (stream) {
    trainer.streamGradients(gradientBuckets(args.model, cfg.bucketKb * 1024),
                            [&](const Bucket& bucket) { link.startBucket(bucket, context); });
  } else if (cfg.bf16Weights()) {  // float32 gradients of bfloat16 weights: through the hooks, then up whole
    trainer.streamGradients(gradientBuckets(args.model, cfg.bucketKb * 1024), [](const Bucket&) {});
  }
  for (StepHeader header = receiveWeights(0); header.control != Control::Stop;) {
    currentStep() = header.step;
    context = fmt::format("step {}", header.step);
    trainer.computeGradient(header.step, header.step, header.lossScale);
    if (overlap) {
      link.finishStep(context);  // the next down message comes with it
      header = useWeights();
    } else {
      if (stream) {
        link.finishUp(context);
      } else {
        link.reduceUp(context);
      }
      header = receiveWeights(header.step + 1);
    }
  }
  // The model now holds the final state (its parameters keep the weights' memory alive).
}

}  // namespace pstrain::exchanges::collective
