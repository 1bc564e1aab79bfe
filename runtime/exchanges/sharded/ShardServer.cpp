#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/Stop.h"
#include "runtime/codec/Codec.h"
#include "runtime/config/Layout.h"
#include "runtime/exchanges/sharded/Shards.h"
#include "runtime/exchanges/ServedRange.h"
#include "runtime/exchanges/Wire.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/ServerLoop.h"
#include "runtime/roles/SummedUpdate.h"

namespace pstrain::exchanges::sharded {

using namespace protocol;

namespace {

// Servers 1..K-1: their range, step by step as server 0 says.
void follow(const roles::RoleArgs& args) {
  comm::Communicator& comm = args.comm;
  const int k = comm.rank();
  ServedRange shard(comm, args.cfg, args.model, args.cfg.updatesOnArrival());
  const std::vector<int> workers = config::Layout(args.cfg, comm.size()).workerRanks();
  const Start start = receiveStart(comm, shard.update(), args.model);
  bool training = start.train != 0;
  StepPlan plan = start.plan;
  bool checkpointing = false;  // server 0 writes a checkpoint: serve it after the next down message
  for (std::int64_t step = start.firstStep;; ++step) {
    std::vector<std::size_t> requests;
    const std::string down = fmt::format("step {}", step);
    shard.startWeightsTo(workers, step, requests, training ? down : "stop");
    for (std::size_t request : requests) comm.wait(request);
    if (checkpointing) serveCheckpoint(comm, shard.update().weights().data_ptr<float>(), shard.update(), down);
    if (!training) return;
    currentStep() = step;
    shard.receiveGradients(down, plan, step);
    const Verdict v = receiveVerdict(comm, shard.partial(), down);
    shard.update().apply(v, step, k);
    plan = v.next;
    if (v.gather) offerCheckpoint(comm, shard.update(), down);
    checkpointing = v.gather != 0;
    training = v.train != 0;
  }
}

// --- server 0 -------------------------------------------------------------------------------

// What server 0 adds to sync's rank 0: its own shard, the other servers' words, and the
// whole model and optimizer state that its checkpoints read (gathered from every server when
// one is due).
class Lead {
 public:
  explicit Lead(roles::Server& s)
      : s_(s),
        comm_(s.comm),
        workers_(config::Layout(s.cfg, s.comm.size()).workerRanks()),
        zero_(s, s.cfg.updatesOnArrival()),
        balancer_(s.cfg.servers, static_cast<int>(workers_.size()), s.shards, s.cfg.balance()) {
    tails_.resize(workers_.size() * s_.messages.tailFloats());
    balancer_.write(s_.messages.shares.data_ptr<float>());
  }

  // Every server's range of the (resumed) model and optimizer state; whether the run trains
  // (ServerZero::start).
  void start(bool training) {
    zero_.start({s_.firstStep, training, planOf(s_.firstStep), startSendsWeights(s_)});
  }

  // The next down message: every worker gets this range and the header, buffers and shares.
  void sendDown(std::int64_t step, const std::string& context) { zero_.sendDown(workers_, step, context); }

  // The step's gradients, buffers and trailers in, every server's Partial, and the Verdict,
  // told to every server. `gradNorm`: the averaged gradient's norm.
  Verdict exchange(std::int64_t step, double lr, double& gradNorm) {
    const std::string context = fmt::format("step {}", step);
    const StepPlan plan = planOf(step);
    receiveTails(context, plan, step);
    zero_.partials()[0] = zero_.own().partial();
    const bool train = step + 1 < s_.total && !s_.publisher->timeToStop(step + 1);
    Verdict v;
    v.apply = 1;
    v.lr = lr;
    v.gather = !train || s_.publisher->checkpointsAt(step);
    v.train = train;
    if (train) v.next = planOf(step + 1);
    v = decide(comm_, s_.update, zero_.partials(), step, v, gradNorm);
    if (eachPart()) s_.update.expectSamples(plan.samples, step);
    // --balance: the next step's shares, from this step's compute seconds (as sync's).
    balancer_.record(s_.messages.trailer + kComputeSeconds);
    balancer_.write(s_.messages.shares.data_ptr<float>());
    return v;
  }

  // The verdict's update of range 0 (made already, part by part, when each part is updated
  // on arrival: its seconds are then within the exchange's) and the buffers' average.
  void apply(const Verdict& v, std::int64_t step, roles::UpdateTime& time) {
    time.add([&] {
      zero_.own().update().apply(v, step, 0);
      if (v.apply) s_.update.averageBuffers(s_.computing);
    });
    if (eachPart()) time.seconds += zero_.partials()[0].updateSeconds;
  }

  bool eachPart() const { return s_.cfg.updatesOnArrival(); }

  // A checkpoint's whole model and optimizer state, until release() (ServerZero::gather).
  void gather(const std::string& context) { zero_.gather(context); }
  void release() { zero_.release(); }

  void countTraffic(roles::StepStats& stats) const { exchanges::countTraffic(stats, s_.messages, zero_.partials()); }

  // Each server's traffic, update time and peak memory, and with --balance each worker's
  // virtual shards, for every metrics line.
  void addServers(metrics::JsonObject& line) const {
    exchanges::addServers(line, zero_.partials(), static_cast<int>(workers_.size()));
    if (s_.cfg.balance()) line.addRaw("virtual_shards_by_worker", metrics::jsonArray(balancer_.counts()));
  }

 private:
  // What a server updating each part on arrival must know of `step` beforehand: its lr, and
  // its sample count (the shards' batch sizes), which the trailer must confirm.
  StepPlan planOf(std::int64_t step) const {
    return {s_.lr(step), static_cast<double>(s_.shards * s_.sampler.batchSizeAt(step))};
  }

  // Every worker's buffers and trailer, summed in worker order into the rest of
  // messages.up; this range's gradients meanwhile (ServedRange::receiveGradients).
  void receiveTails(const std::string& context, const StepPlan& plan, std::int64_t step) {
    const std::size_t n = s_.messages.tailFloats();
    const std::size_t workers = workers_.size();
    std::vector<std::size_t> requests, got(workers);
    for (std::size_t i = 0; i < workers; ++i) {
      requests.push_back(comm_.startReceive(tails_.data() + i * n, n * sizeof(float), workers_[i], kTailTag, &got[i],
                                            context));
    }
    zero_.own().receiveGradients(context, plan, step);
    float* sum = s_.messages.tail();
    std::fill(sum, sum + n, 0.0f);
    for (std::size_t i = 0; i < workers; ++i) {
      comm_.wait(requests[i]);
      expectBytes(got[i], n * sizeof(float), workers_[i], "buffers and trailer", context);
      for (std::size_t j = 0; j < n; ++j) sum[j] += tails_[i * n + j];
    }
  }

  roles::Server& s_;
  comm::Communicator& comm_;
  const std::vector<int> workers_;
  ServerZero zero_;
  std::vector<float> tails_;        // by worker: its buffers and trailer
  roles::ShareBalancer balancer_;  // --balance: the workers' shares (ranks K on)
};

// Server 0's loop: sync's, range 0 of it, with the other servers told what to do.
void lead(roles::Server& s) {
  Lead lead(s);
  std::int64_t step = s.firstStep;
  bool training = step < s.total && !s.publisher->timeToStop(step);
  lead.start(training);
  s.setHeader(step, training ? Control::Train : Control::Stop, training ? s.lr(step) : 0);
  lead.sendDown(step, training ? fmt::format("step {}", step) : s.stopContext);
  s.publisher->setExtras([&](metrics::JsonObject& line) { lead.addServers(line); });
  roles::Period period;
  while (training) {
    currentStep() = step;
    const double lr = s.lr(step);
    double gradNorm = 0;
    const Verdict v = lead.exchange(step, lr, gradNorm);
    roles::UpdateTime update;
    lead.apply(v, step, update);
    if (v.gather) lead.gather(fmt::format("step {}", step));
    const std::int64_t done = step++;
    training = v.train != 0;
    s.setHeader(step, training ? Control::Train : Control::Stop, training ? s.lr(step) : 0);
    lead.sendDown(step, training ? fmt::format("step {}", step) : s.stopContext);
    roles::StepStats stats = period.close(s, s.computing, update, lead.eachPart(), v.apply != 0);
    stats.gradNorm = gradNorm;
    lead.countTraffic(stats);
    s.publisher->record(done, lr, stats);
    if (training) lead.release();
  }
  s.publisher->finish(step);
  lead.release();
}

}  // namespace

void serve(const roles::RoleArgs& args) {
  if (args.comm.rank() != 0) return follow(args);
  roles::runServer(args, lead, [](const roles::Server& s) { return fmt::format("{} servers", s.cfg.servers); }, false);
}

}  // namespace pstrain::exchanges::sharded
