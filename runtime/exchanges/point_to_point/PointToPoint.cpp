#include "runtime/exchanges/point_to_point/PointToPoint.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <numeric>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/Stop.h"
#include "runtime/config/Layout.h"
#include "runtime/exchanges/RangesWorker.h"
#include "runtime/exchanges/Follow.h"
#include "runtime/exchanges/ServedRange.h"
#include "runtime/exchanges/ServerZero.h"
#include "runtime/exchanges/CheckpointGather.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/ServerRanges.h"
#include "runtime/exchanges/point_to_point/Arrival.h"
#include "runtime/exchanges/Wire.h"
#include "runtime/metrics/Clock.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/ServerLoop.h"

namespace pstrain::exchanges::point_to_point {
namespace {

using namespace protocol;
using metrics::Clock;
using metrics::secondsSince;

// What the point-to-point loop counts of stale gradients, in the words of the mode's
// policy: backup drops late ones, async rejects (and has recomputed) too stale ones.
struct StaleCounts {
  explicit StaleCounts(const config::StalePolicy& policy) : policy(policy) {}
  config::StalePolicy policy;
  std::int64_t accepted = 0, stale = 0, staleTotal = 0;  // accepted and stale: since the last metrics line
  std::map<int, std::int64_t> staleByRank;
  std::map<std::int64_t, std::int64_t> staleness;  // over the run: updates behind -> accepted gradients

  void addTo(metrics::JsonObject& line) {
    if (policy == config::StalePolicy::Drop) {
      line.add("dropped", stale).add("dropped_total", staleTotal);
      line.addRaw("dropped_by_rank", metrics::jsonCounts(staleByRank));
    } else {
      line.add("applied", accepted).add("rejected", stale).add("rejected_total", staleTotal);
      line.addRaw("staleness_histogram", metrics::jsonCounts(staleness));
      line.addRaw("rejected_by_rank", metrics::jsonCounts(staleByRank));
    }
    accepted = stale = 0;
  }
  std::string summary(const char* mode) const {
    return policy == config::StalePolicy::Drop
               ? fmt::format("pstrain: {}: {} late gradient(s) dropped", mode, staleTotal)
               : fmt::format("pstrain: {}: {} stale gradient(s) rejected", mode, staleTotal);
  }
};

// Servers 1..K-1, arrival by arrival as server 0 says (Arrival): an accepted gradient's
// range joins the sum, and the update that a quorum completes is the Verdict's; a stale
// one's is read and dropped, and its worker gets this range as it is.
class Arrivals : public FollowPolicy {
 public:
  Arrivals(comm::Communicator& comm, const config::TrainConfig& cfg)
      : comm_(comm), layout_(cfg, comm.size()), quorum_(cfg.batchesPerUpdate(layout_.workers())) {}

  bool start(ServedRange& served, const Start& start) override {
    served.sendWeightsTo(layout_.workerRanks(), start.firstStep, fmt::format("step {}", start.firstStep));
    return true;  // server 0 says when it stops (Arrival::Stop, End)
  }
  bool takeIn(ServedRange& served, std::int64_t step) override {
    const std::string context = fmt::format("step {}", step);
    for (;;) {
      const Arrival a = receiveValue<Arrival>(comm_, 0, context);
      const int worker = static_cast<int>(a.worker);
      if (a.kind == Arrival::End) {
        if (gathering_) serveCheckpoint(comm_, heldWeights(served), served.update(), "stop");
        return false;
      }
      if (a.kind == Arrival::Stop) {  // the last checkpoint is served at End
        offerCheckpoint(comm_, served.update(), "stop");
        gathering_ = true;
        served.sendWeightsTo(waiting_, step, "stop");
        waiting_.clear();
        continue;
      }
      if (a.kind != Arrival::Accept) {  // Stale, Drain
        served.receiveGradientOf(worker, ServedRange::Use::Drop, context);
        served.sendWeightsTo({worker}, step, context);
        continue;
      }
      served.receiveGradientOf(worker, waiting_.empty() ? ServedRange::Use::First : ServedRange::Use::Add, context);
      waiting_.push_back(worker);
      if (static_cast<int>(waiting_.size()) == quorum_) return true;
    }
  }
  void sendDown(ServedRange& served, const Verdict& v) override {
    const auto next = static_cast<std::int64_t>(v.step) + 1;
    served.sendWeightsTo(waiting_, next, fmt::format("step {}", next - 1));
    waiting_.clear();
  }

 private:
  comm::Communicator& comm_;
  const config::Layout layout_;
  const int quorum_;
  std::vector<int> waiting_;  // workers whose gradient is in the coming update
  bool gathering_ = false;    // Stop: the last checkpoint is served at End
};

void follow(const roles::RoleArgs& args) {
  ServedRange served(args.comm, args.cfg, args.model);
  Arrivals arrivals(args.comm, args.cfg);
  exchanges::follow(args.comm, served, args.model, arrivals);
}

// Each of `workers` workers' first batch: 0 from the start; resumed, the checkpoint's counts,
// or where the workers are not as many as they were (pstrain-run shrank or regrew the job:
// other shards), the batches the run has taken so far, shared out evenly; a checkpoint of
// an earlier version, which has no counts, took a quorum's batches per update.
std::vector<std::int64_t> firstBatches(const roles::Server& s, int workers) {
  const std::vector<std::int64_t>& saved = s.resumedBatches;
  if (static_cast<int>(saved.size()) == workers) return saved;
  const std::int64_t taken = saved.empty() ? s.firstStep * s.cfg.batchesPerUpdate(workers)
                                           : std::accumulate(saved.begin(), saved.end(), std::int64_t(0));
  return std::vector<std::int64_t>(static_cast<std::size_t>(workers), taken / workers);
}

// Server 0: sync's rank 0 for the point-to-point policies (Mode.h), over K servers (K = 1:
// range 0 is the whole model). A gradient computed on weights `behind` updates old is
// accepted if behind <= the limit (backup: 0, the step's own weights; async:
// --max-staleness), and an update takes the quorum of accepted gradients (backup:
// --aggregate K, Chen et al. 2016; async: 1). A stale gradient is dropped and its worker
// gets the newest weights (Drop), or its worker computes the same batch again on them
// (RetryAfter: Control::Retry). Workers whose gradient went into an update wait for its
// weights. Server 0 decides each arrival from the worker's tail, which comes first (Wire.h),
// and tells the other servers, which take that worker's range next: every server sums the
// same gradients in the same order, and a worker gets every range at one version.
class Lead {
 public:
  explicit Lead(roles::Server& s)
      : s_(s),
        comm_(s.comm),
        zero_(s, serverRanges(s.model, s.cfg), ServedRange::Messages::Served),
        counts_(s.cfg.modeInfo().stale),
        tail_(s.messages.tailFloats()) {}

  // Every server's range of the (resumed) model and optimizer state (a run that ends at once
  // still gathers its last checkpoint: stop()), then each worker's first batch and the
  // first weights to every worker.
  void start() {
    zero_.start({s_.firstStep, 1, {}, startSendsWeights(s_)});
    const std::vector<int> workers = config::Layout(s_.cfg, comm_.size()).workerRanks();
    batches_ = firstBatches(s_, static_cast<int>(workers.size()));
    for (std::size_t i = 0; i < workers.size(); ++i) sendValue(comm_, batches_[i], workers[i], "start");
    s_.setHeader(s_.firstStep, Control::Train, s_.lr(s_.firstStep));
    sendDown(workers, s_.firstStep, fmt::format("step {}", s_.firstStep));
    s_.publisher->setExtras([this](metrics::JsonObject& line) {
      counts_.addTo(line);
      addServers(line, zero_.partials(), s_.cfg.batchesPerUpdate(s_.computing));
    });
    s_.publisher->setCheckpointExtras([this](checkpoint::Checkpoint& ckpt) { ckpt.workerBatches = batches_; });
  }

  // The loop: arrivals until the run's updates are done (or it is told to stop).
  void run() {
    std::int64_t step = s_.firstStep;
    const int quorum = s_.cfg.batchesPerUpdate(s_.computing);  // <= workers: checked at start-up
    exchangeStart_ = Clock::now();
    while (step < s_.total && !s_.publisher->timeToStop(step)) {
      currentStep() = step;
      const std::string context = fmt::format("step {}", step);
      const int worker = takeTail(context);
      const std::int64_t behind = step - trailerVersion(tail_[versionAt()], worker);
      if (behind > limit()) {
        dropStale(worker, step, context);
        continue;
      }
      tell({Arrival::Accept, worker});
      ++batches_[workerIndex(worker)];  // its next weights come with Train
      zero_.own().receiveGradientOf(worker, waiting_.empty() ? ServedRange::Use::First : ServedRange::Use::Add, context);
      addTail();
      waiting_.push_back(worker);
      ++counts_.accepted;
      ++counts_.staleness[behind];
      if (static_cast<int>(waiting_.size()) < quorum) continue;
      update(step, quorum, context);
      ++step;
    }
    stop(step);
  }

 private:
  std::size_t workerIndex(int rank) const {
    return static_cast<std::size_t>(config::Layout(s_.cfg, comm_.size()).workerIndex(rank));
  }

  // Where the version of the weights that the tail's gradient was computed on is in it.
  std::size_t versionAt() const { return static_cast<std::size_t>(s_.messages.trailer - s_.messages.tail()) + kVersion; }

  std::int64_t limit() const {
    return s_.cfg.modeInfo().stale == config::StalePolicy::RetryAfter ? s_.cfg.maxStaleness : 0;
  }

  // Whichever worker's tail comes first, into tail_; its rank.
  int takeTail(const std::string& context) {
    comm_.expectLongWait();  // the workers compute first
    const auto got = comm_.receive(tail_.data(), tail_.size() * sizeof(float), comm::Communicator::kAnySource, context);
    if (got.source < s_.cfg.servers) {
      throw CommError(fmt::format("{}: server {} sent a lead message where a worker's up message was due", context,
                                  got.source));
    }
    expectBytes(got.bytes, tail_.size() * sizeof(float), got.source, "buffers and trailer", context);
    return got.source;
  }

  // The tail just taken into the sum of the coming update's (the first: it).
  void addTail() {
    float* sum = s_.messages.tail();
    if (waiting_.empty()) {
      std::copy(tail_.begin(), tail_.end(), sum);
    } else {
      for (std::size_t i = 0; i < tail_.size(); ++i) sum[i] += tail_[i];
    }
  }

  void tell(const Arrival& a) {
    for (int k = 1; k < zero_.servers(); ++k) sendValue(comm_, a, k, "arrival");
  }

  // A gradient over the limit: counted, read and dropped by every server, and its worker gets
  // the weights as they are (RetryAfter: told to compute that batch again).
  void dropStale(int worker, std::int64_t step, const std::string& context) {
    ++counts_.stale;
    ++counts_.staleTotal;
    ++counts_.staleByRank[worker];
    tell({Arrival::Stale, worker});
    zero_.own().receiveGradientOf(worker, ServedRange::Use::Drop, context);
    const bool retry = s_.cfg.modeInfo().stale == config::StalePolicy::RetryAfter;
    if (!retry) ++batches_[workerIndex(worker)];
    s_.setHeader(step, retry ? Control::Retry : Control::Train, s_.lr(step));
    sendDown({worker}, step, context);
  }

  // The quorum is in: every server's Partial, the Verdict, range 0's update, and the new
  // weights to the workers that wait for them.
  void update(std::int64_t step, int quorum, const std::string& context) {
    const double lr = s_.lr(step);
    roles::StepStats stats = s_.stats(quorum);
    stats.exchangeSeconds = secondsSince(exchangeStart_);
    Verdict v;
    v.apply = 1;
    v.lr = lr;
    v.gather = s_.publisher->checkpointsAt(step);
    v.train = 1;
    v = zero_.decide(step, v, stats.gradNorm);
    roles::UpdateTime time;
    time.add([&] { zero_.apply(v, step, quorum); });
    stats.updateSeconds = time.seconds;
    stats.applied = v.apply != 0;
    if (v.gather) zero_.gather(context);
    s_.setHeader(step + 1, Control::Train, s_.lr(std::min(step + 1, s_.total - 1)));
    sendDown(waiting_, step + 1, context);
    waiting_.clear();
    countTraffic(stats, s_.messages, zero_.partials());
    s_.publisher->record(step, lr, stats);
    zero_.release();
    exchangeStart_ = Clock::now();
  }

  // Range 0 of the weights of update `version`, the header and the rest to `workers`.
  void sendDown(const std::vector<int>& workers, std::int64_t version, const std::string& context) {
    zero_.sendDown(workers, version, context);
  }

  // The end: every worker is either waiting (its gradient is in) or computing. The waiting
  // ones get the last weights with Stop; each computing one's gradient is read and dropped
  // (Drain) and it gets them too. The servers meanwhile offer the last checkpoint, which the
  // Publisher's last files read.
  void stop(std::int64_t step) {
    tell({Arrival::Stop, -1});
    zero_.gather(s_.stopContext);
    s_.setHeader(step, Control::Stop);
    sendDown(waiting_, step, s_.stopContext);
    for (int left = s_.computing - static_cast<int>(waiting_.size()); left > 0; --left) {
      const int worker = takeTail(s_.stopContext);
      tell({Arrival::Drain, worker});
      zero_.own().receiveGradientOf(worker, ServedRange::Use::Drop, s_.stopContext);
      sendDown({worker}, step, s_.stopContext);
    }
    // The waiting ones' gradients went into no update: the last checkpoint counts their
    // batches as not taken, so that a resumed run computes them again, as the whole run did.
    for (int worker : waiting_) --batches_[workerIndex(worker)];
    waiting_.clear();
    tell({Arrival::End, -1});
    std::cout << counts_.summary(s_.cfg.modeInfo().name) << std::endl;
    s_.publisher->finish(step);
    zero_.release();
  }

  roles::Server& s_;
  comm::Communicator& comm_;
  ServerZero zero_;
  StaleCounts counts_;
  std::vector<float> tail_;         // the last tail taken
  std::vector<int> waiting_;        // workers whose gradient is in the coming update
  // Each worker's next batch, by worker index: a worker counts its own (one more on every
  // answer but Retry: RangesWorker), and server 0 counts them alike, so that a checkpoint
  // holds them and a resumed run goes on where each worker was.
  std::vector<std::int64_t> batches_;
  Clock::time_point exchangeStart_;
};

void lead(roles::Server& s) {
  Lead lead(s);
  lead.start();
  lead.run();
}

// A gradient carries the version of the weights it was computed on as a float: the run
// must count fewer steps than a float holds exactly. Then the mode's policy, in words.
std::string describe(const roles::Server& s) {
  const config::ModeInfo& mode = s.cfg.modeInfo();
  if (s.total >= kMaxVersionedSteps) {
    throw ConfigError(fmt::format("--mode {} counts at most {} steps", mode.name, kMaxVersionedSteps - 1));
  }
  std::string words = mode.quorum == config::Quorum::Aggregate
                          ? fmt::format("aggregate {} of {}", s.cfg.batchesPerUpdate(s.computing), s.computing)
                      : mode.stale == config::StalePolicy::RetryAfter ? fmt::format("max staleness {}", s.cfg.maxStaleness)
                                                                       : "";
  if (s.cfg.servers > 1) words += fmt::format("{}{} servers", words.empty() ? "" : ", ", s.cfg.servers);
  return words;
}

void serve(const roles::RoleArgs& args) {
  if (args.comm.rank() != 0) return follow(args);
  roles::runServer(args, lead, describe, false);
}

void others(const roles::RoleArgs& args) {
  if (args.comm.rank() < args.cfg.servers) return serve(args);
  runRangesWorker(args, Pace::Own);
}

// The quorum's gradients in and its weights out through the servers' links (each carrying
// 1/K of every message), one message after the other, and the update (1/K of it on each):
//   aggregate (backup): k = n - 1 of n (at least 1): the k-th fastest batch, k x b per update;
//   one (async): each worker on its own cycle (batch + its messages both ways), as long as
//     the servers' links and updates keep up with all of them; one batch per update.
StepEstimate cost(const StepCost& c) {
  const Links l = linksOf(c.m, c.n);
  const CodecCost &grad = c.grad, &weights = c.weights;
  const ProbeMeasurements& m = c.m;
  const double servers = c.servers, update = m.updateSeconds / servers;
  auto throughServer = [&](double bytes) { return message(bytes / servers, l.worstLatency, l.serverBandwidth); };
  if (c.mode.quorum == config::Quorum::Aggregate) {
    const int k = std::max(1, c.n - 1);
    return {kthFastest(m, c.n, k) + grad.encodeSeconds + k * throughServer(grad.bytes) + k * grad.decodeSeconds / servers +
                update + weights.encodeSeconds + k * throughServer(weights.bytes) + weights.decodeSeconds,
            k * m.batchSamples};
  }
  // Samples per second: each worker's own cycle, unless the servers are the bottleneck.
  double rate = 0;
  for (int i = 0; i < c.n; ++i) {
    const double cycle = m.computeSeconds[i] + grad.encodeSeconds + message(grad.bytes, m.latencySeconds[i], m.bytesPerSecond[i]) +
                         grad.decodeSeconds / servers + update + weights.encodeSeconds +
                         message(weights.bytes, m.latencySeconds[i], m.bytesPerSecond[i]) + weights.decodeSeconds;
    rate += m.batchSamples / cycle;
  }
  const double serverPerGradient = (grad.bytes + weights.bytes) / servers / l.serverBandwidth +
                                   (grad.decodeSeconds + m.updateSeconds + weights.encodeSeconds) / servers;
  rate = std::min(rate, m.batchSamples / serverPerGradient);
  return {m.batchSamples / rate, m.batchSamples};  // one gradient per update
}

// With K > 1 servers, which one owns which parameters.
PlanText plan(const PlanFacts& f) {
  PlanText text;
  if (f.cfg.servers > 1) text.lines = describeRanges(serverRanges(f.model, f.cfg));
  return text;
}

// A server: its range's optimizer state and the range's sum (a gradient codec's decoded range
// and frames too), beside the slots of one worker's raw parts (Wire.h: it takes one worker's
// range at a time). A worker: its whole gradient, sent after backward, and any residual.
Memory memory(const config::RunPlan& cfg, const config::Layout&) {
  Memory m;
  m.held = weightBytes(cfg) + 4;
  m.worker = residualBytes(cfg);
  m.server = stateBytes(cfg) + 4 + decodingBytes(cfg);
  if (!cfg.compressesGradients()) m.slottedWorkers = 1;
  return m;
}

// A model whose parameters cannot give every server a range is refused (Ranges.h).
void check(const config::TrainConfig& cfg, const models::Net& model) { serverRanges(model, cfg); }

// Server k takes its range from its own model (receiveStart); server 0's checkpoints gather
// the others' ranges.
KeyRange serverWeights(const config::TrainConfig& cfg, const models::Net& model, int rank) {
  return serverRanges(model, cfg)[static_cast<std::size_t>(rank)];
}

}  // namespace
}  // namespace pstrain::exchanges::point_to_point

namespace pstrain::exchanges {

const Exchange kPointToPoint = {config::Exchange::PointToPoint, nullptr, point_to_point::serve, point_to_point::others,
                                point_to_point::cost, point_to_point::plan, point_to_point::memory,
                                point_to_point::check, point_to_point::serverWeights, true};

}  // namespace pstrain::exchanges
