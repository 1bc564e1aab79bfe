#include "runtime/exchanges/rounds/OuterRanges.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>

#include "runtime/Stop.h"
#include "runtime/exchanges/rounds/RoundChain.h"
#include "runtime/exchanges/rounds/RoundsPlan.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"

namespace pstrain::exchanges::rounds {

using namespace roles;

using namespace exchanges;

OuterLead::OuterLead(Server& s)
    : s_(s),
      ranges_(roundsRanges(s.model, s.cfg)),
      own_(s.cfg, ranges_[0], s.messages.weights.narrow(0, ranges_[0].begin, ranges_[0].size()),
           protocol::parameterShapes(s.model)),
      partials_(ranges_.size()),
      gather_(s.comm, ranges_, *s.optimizer, own_) {}

void OuterLead::start(bool training) {
  sendStarts(s_.comm, ranges_, {s_.firstStep, training, {}, startSendsWeights(s_)}, s_.messages.weights, *s_.optimizer,
             own_.optimizer());
}

bool OuterLead::apply(std::int64_t step, double lr, bool skip, bool gather, bool train, UpdateTime& time) {
  partials_[0] = own_.partial(own_.takeUpdateSeconds(), sent_, received_);
  Verdict v;
  v.apply = skip ? 0 : 1;
  v.lr = lr;
  v.gather = gather;
  v.train = train;
  double gradNorm = 0;
  v = decide(s_.comm, s_.update, partials_, step, v, gradNorm);
  time.add([&] {
    own_.apply(v, step, 0);
    if (v.apply) s_.update.averageBuffers(s_.computing);
  });
  return v.apply != 0;
}

void followRounds(const RoleArgs& args) {
  comm::Communicator& comm = args.comm;
  const config::TrainConfig& cfg = args.cfg;
  const int k = comm.rank();
  const auto ranges = roundsRanges(args.model, cfg);
  const exchanges::KeyRange range = ranges[static_cast<std::size_t>(k)];
  const auto floats = static_cast<std::size_t>(range.size());
  const protocol::FloatBuffer weights(floats);  // the outer step's
  RangeUpdate update(cfg, range, weights.view(0, range.size()), protocol::parameterShapes(args.model));
  const Start start = receiveStart(comm, update, args.model);
  // Seeded as server 0's chain (and one server's): the same codes whatever the servers.
  RoundChain chain(comm, endsOf(ranges), 0, 0, roundsPlanOf(cfg).codecs, cfg.seed * 7919u);
  // Under a lossy down codec, the range of the weights as the workers hold them.
  std::unique_ptr<protocol::FloatBuffer> copy;
  if (chain.sendsUpdates()) {
    copy = std::make_unique<protocol::FloatBuffer>(floats);
    std::copy_n(weights.data(), floats, copy->data());
    roundToCopy(copy->data(), range.size());
  }
  float* held = copy ? copy->data() : weights.data();
  chain.startServerDown(nullptr, held, nullptr, "the first round");
  chain.finish();
  double sent = 0;
  for (std::int64_t round = 1, training = start.train; training; ++round) {
    const std::string context = fmt::format("round {}", round);
    chain.startServerUp(update.sum(), nullptr, context);
    comm.expectLongWait();  // the workers train first
    chain.finish();
    const double received = chain.take().received;
    const Verdict v = receiveVerdict(comm, update.partial(update.takeUpdateSeconds(), sent, received), context);
    update.apply(v, static_cast<std::int64_t>(v.step), k);
    chain.startServerDown(nullptr, held, copy ? weights.data() : nullptr, context);
    chain.finish();
    sent = chain.take().sent;
    if (v.gather) {  // the workers train on meanwhile
      offerCheckpoint(comm, update, context);
      serveCheckpoint(comm, held, update, context);
    }
    training = v.train != 0;
  }
}

}  // namespace pstrain::exchanges::rounds
