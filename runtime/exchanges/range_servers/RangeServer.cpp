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
#include "runtime/exchanges/range_servers/RangeServer.h"
#include "runtime/exchanges/Follow.h"
#include "runtime/exchanges/ServedRange.h"
#include "runtime/exchanges/ServerZero.h"
#include "runtime/exchanges/Wire.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/ServerLoop.h"
#include "runtime/roles/SummedStep.h"

namespace pstrain::exchanges::range_servers {

using namespace protocol;

namespace {

// Servers 1..K-1 in lockstep: every worker's gradient of the range each step, the range's
// weights to every worker after each verdict.
class Lockstep : public FollowPolicy {
 public:
  Lockstep(comm::Communicator& comm, const config::TrainConfig& cfg)
      : workers_(config::Layout(cfg, comm.size()).workerRanks()) {}

  bool start(ServedRange& served, const Start& start) override {
    plan_ = start.plan;
    served.sendWeightsTo(workers_, start.firstStep, contextOf(start.firstStep, start.train != 0));
    return start.train != 0;
  }
  bool takeIn(ServedRange& served, std::int64_t step) override {
    served.receiveGradients(fmt::format("step {}", step), plan_, step);
    return true;
  }
  void sendDown(ServedRange& served, const Verdict& v) override {
    plan_ = v.next;
    const auto next = static_cast<std::int64_t>(v.step) + 1;
    served.sendWeightsTo(workers_, next, contextOf(next, v.train != 0));
  }

 private:
  // The down message of update `version`: the stop's when not `training`.
  static std::string contextOf(std::int64_t version, bool training) {
    return training ? fmt::format("step {}", version) : "stop";
  }

  const std::vector<int> workers_;
  StepPlan plan_;  // of the next step: its lr and samples (updates on arrival)
};

void follow(const roles::RoleArgs& args) {
  ServedRange served(args.comm, args.cfg, args.model, args.cfg.updatesOnArrival());
  Lockstep lockstep(args.comm, args.cfg);
  exchanges::follow(args.comm, served, args.model, lockstep);
}

// --- server 0 -------------------------------------------------------------------------------

// What server 0 adds to sync's rank 0: its own range, the other servers' words, and the
// whole model and optimizer state that its checkpoints read (gathered from every server when
// one is due).
class Lead {
 public:
  explicit Lead(roles::Server& s)
      : s_(s),
        comm_(s.comm),
        workers_(config::Layout(s.cfg, s.comm.size()).workerRanks()),
        zero_(s, serverRanges(s.model, s.cfg), ServedRange::Messages::Served, s.cfg.updatesOnArrival()),
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
    const bool train = step + 1 < s_.total && !s_.publisher->timeToStop(step + 1);
    Verdict v;
    v.apply = 1;
    v.lr = lr;
    v.gather = !train || s_.publisher->checkpointsAt(step);
    v.train = train;
    if (train) v.next = planOf(step + 1);
    v = zero_.decide(step, v, gradNorm);
    if (updatesOnArrival()) s_.admission.expectSamples(s_.messages.trailer, plan.samples, step);
    // --balance: the next step's shares, from this step's compute seconds (as sync's).
    balancer_.record(s_.messages.trailer + kComputeSeconds);
    balancer_.write(s_.messages.shares.data_ptr<float>());
    return v;
  }

  // The verdict's update of range 0 (made already, part by part, when each part is updated
  // on arrival: its seconds are then within the exchange's) and the buffers' average.
  void apply(const Verdict& v, std::int64_t step, roles::UpdateTime& time) {
    time.add([&] { zero_.apply(v, step, s_.computing); });
    if (updatesOnArrival()) time.seconds += zero_.partials()[0].updateSeconds;
  }

  bool updatesOnArrival() const { return s_.cfg.updatesOnArrival(); }

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
    roles::StepStats stats = period.close(s, s.computing, update, lead.updatesOnArrival(), v.apply != 0);
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

}  // namespace pstrain::exchanges::range_servers
