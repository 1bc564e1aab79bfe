#include "runtime/exchanges/rounds/OuterRanges.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>

#include "runtime/Stop.h"
#include "runtime/exchanges/CheckpointGather.h"
#include "runtime/exchanges/Follow.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/ServerRanges.h"
#include "runtime/exchanges/rounds/RoundChain.h"
#include "runtime/exchanges/rounds/RoundsPlan.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"

namespace pstrain::exchanges::rounds {

using namespace roles;

using namespace exchanges;

namespace {

// Servers 1..K-1 of the outer step: each round's range of the summed pseudo-gradient up the
// chain, the range of the global weights down it (under a lossy down codec, the update
// toward them, and the range of the copy the workers hold).
class Chain : public FollowPolicy {
 public:
  Chain(comm::Communicator& comm, const config::TrainConfig& cfg, const std::vector<KeyRange>& ranges)
      : comm_(comm),
        // Seeded as server 0's chain (and one server's): the same codes whatever the servers.
        chain_(comm, endsOf(ranges), 0, 0, roundsPlanOf(cfg).codecs, cfg.seed * 7919u) {}

  bool start(ServedRange& served, const Start& start) override {
    const std::int64_t n = served.update().range().size();
    if (chain_.sendsUpdates()) {  // the copy the workers hold, from the (resumed) weights
      copy_ = std::make_unique<protocol::FloatBuffer>(static_cast<std::size_t>(n));
      std::copy_n(served.update().weights().data_ptr<float>(), n, copy_->data());
      roundToCopy(copy_->data(), n);
    }
    chain_.startServerDown(nullptr, held(served), nullptr, "the first round");
    chain_.finish();
    return start.train != 0;
  }
  bool takeIn(ServedRange& served, std::int64_t) override {
    const std::string context = fmt::format("round {}", ++round_);
    chain_.startServerUp(served.update().sum(), nullptr, context);
    comm_.expectLongWait();  // the workers train first
    chain_.finish();
    served.countTraffic(sent_, chain_.take().received);
    return true;
  }
  void sendDown(ServedRange& served, const Verdict&) override {
    float* weights = served.update().weights().data_ptr<float>();
    chain_.startServerDown(nullptr, held(served), copy_ ? weights : nullptr, fmt::format("round {}", round_));
    chain_.finish();
    sent_ = chain_.take().sent;
  }
  // The range as the workers hold it: the copy under a lossy down codec.
  const float* heldWeights(ServedRange& served) override { return held(served); }

 private:
  float* held(ServedRange& served) {
    return copy_ ? copy_->data() : served.update().weights().data_ptr<float>();
  }

  comm::Communicator& comm_;
  RoundChain chain_;
  std::unique_ptr<protocol::FloatBuffer> copy_;  // under a lossy down codec
  std::int64_t round_ = 0;
  double sent_ = 0;  // the last round's down bytes
};

}  // namespace

void followRounds(const RoleArgs& args) {
  const auto ranges = roundsRanges(args.model, args.cfg);
  ServedRange served(args.comm, args.cfg, ranges[static_cast<std::size_t>(args.comm.rank())], at::Tensor(),
                     protocol::parameterShapes(args.model), false, ServedRange::Messages::Elsewhere);
  Chain chain(args.comm, args.cfg, ranges);
  follow(args.comm, served, args.model, chain);
}

}  // namespace pstrain::exchanges::rounds
