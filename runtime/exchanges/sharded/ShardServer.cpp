#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Stop.h"
#include "runtime/codec/Codec.h"
#include "runtime/exchanges/sharded/Shards.h"
#include "runtime/exchanges/sharded/Wire.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/ServerLoop.h"
#include "runtime/roles/SummedUpdate.h"

namespace pstrain::exchanges::sharded {

using namespace protocol;

namespace {

// One server's key range (RangeUpdate), with the workers' gradients of it received over the
// sharded exchange's own channels (Wire.h).
class Shard {
 public:
  // `weights`: as RangeUpdate's.
  Shard(comm::Communicator& comm, const config::TrainConfig& cfg, KeyRange range, at::Tensor weights)
      : comm_(comm),
        cfg_(cfg),
        range_(std::move(range)),
        update_(cfg, range_, std::move(weights), cfg.updatesOnArrival()) {
    if (update_.eachPart()) partSum_.resize(static_cast<std::size_t>(std::min(kPartFloats, range_.size())));
    if (cfg.compressesGradients()) {
      const bool feedback = config::errorFeedbackOn(cfg.errorFeedback, cfg.gradientCodec());
      // It only decodes, and a frame carries all that takes (randomk's indices): no seed.
      codec_ = codec::makeCodec(cfg.gradientCodec(), range_.shapes, 0, "compress", feedback);
      decoded_.resize(static_cast<std::size_t>(range_.size()));
    }
    if (cfg.compressesWeights()) {  // deterministic codecs (Codecs.h: no sparsifier codes weights): no seed
      weightCodec_ = codec::makeCodec(cfg.weightCodec(), range_.shapes, 0, "compress-weights");
    }
    const int workers = comm.size() - cfg.servers;
    slots_.resize(codec_ ? 2 : 2 * static_cast<std::size_t>(workers));
    for (auto& slot : slots_) slot.resize(codec_ ? codec_->maxFrameBytes() : kPartFloats * sizeof(float));
  }

  RangeUpdate& update() { return update_; }

  // Starts sending this range of the weights to every worker (Wire.h; the caller waits):
  // with --compress-weights one frame of this range's codec; else part by part, float32
  // from where they are, or, to workers that hold bfloat16 ones (--precision
  // bf16-weights), converted into a few staging parts, each reused once its sends are done
  // (those are then done when this returns).
  void startWeightsDown(std::vector<std::size_t>& requests, const std::string& context) {
    const std::int64_t parts = partsOf(range_.size());
    const float* weights = update_.weights().data_ptr<float>();
    if (weightCodec_) {
      weightFrame_.clear();
      weightCodec_->encode(weights, weightFrame_);
      for (int w = cfg_.servers; w < comm_.size(); ++w) {
        requests.push_back(comm_.startSend(weightFrame_.data(), weightFrame_.size(), w, kWeightsTag, context));
      }
      bytesOut_ = static_cast<double>(weightFrame_.size());
      return;
    }
    if (!cfg_.bf16Weights()) {
      for (std::int64_t p = 0; p < parts; ++p) {
        for (int w = cfg_.servers; w < comm_.size(); ++w) {
          requests.push_back(comm_.startSend(weights + p * kPartFloats, partSize(range_.size(), p) * sizeof(float), w,
                                             kWeightsTag, context));
        }
      }
      bytesOut_ = static_cast<double>(bytesOf(range_));
      return;
    }
    constexpr std::int64_t kStagedParts = 4;
    if (bf16_.numel() == 0) bf16_ = at::empty({kStagedParts, kPartFloats}, at::kBFloat16);
    std::vector<std::vector<std::size_t>> sending(kStagedParts);
    for (std::int64_t p = 0; p < parts; ++p) {
      auto& slot = sending[static_cast<std::size_t>(p % kStagedParts)];
      for (std::size_t request : slot) comm_.wait(request);
      slot.clear();
      const std::int64_t n = partSize(range_.size(), p);
      at::Tensor staged = bf16_[p % kStagedParts].narrow(0, 0, n);
      staged.copy_(update_.weights().narrow(0, p * kPartFloats, n));
      for (int w = cfg_.servers; w < comm_.size(); ++w) {
        slot.push_back(comm_.startSend(staged.data_ptr(), static_cast<std::size_t>(n) * 2, w, kWeightsTag, context));
      }
    }
    for (auto& slot : sending) {
      for (std::size_t request : slot) comm_.wait(request);
    }
    bytesOut_ = static_cast<double>(range_.size()) * 2;
  }

  // The workers' gradients of this range, summed in worker order (as one server sums them:
  // the same floats). Raw, part by part (Wire.h) from every worker: worker 0's part lands
  // straight in the sum, the others' in a ring of slots, two per worker, that receive while
  // earlier parts are added. Coded, a frame per worker, into two slots likewise. Updating
  // each part (RangeUpdate::eachPart), worker 0's part lands in the ring too, and each
  // part's sum is applied by `plan` as soon as the last worker's part is added.
  void receiveGradients(const std::string& context, const StepPlan& plan, std::int64_t step) {
    const int first = cfg_.servers, workers = comm_.size() - cfg_.servers;
    const std::int64_t parts = codec_ ? 1 : partsOf(range_.size());
    // Message m: part partOf(m) of worker m % workers; the parts come last first (Wire.h).
    const std::size_t messages = static_cast<std::size_t>(parts * workers);
    auto partOf = [&](std::size_t m) { return parts - 1 - static_cast<std::int64_t>(m / workers); };
    std::vector<std::size_t> got(messages), requests(messages);
    const bool eachPart = update_.eachPart();
    auto target = [&](std::size_t m) -> char* {
      if (!codec_ && !eachPart && m % workers == 0) return reinterpret_cast<char*>(update_.sum() + partOf(m) * kPartFloats);
      return slots_[m % slots_.size()].data();
    };
    auto post = [&](std::size_t m) {
      if (m >= messages) return;
      const std::size_t capacity = codec_ ? slots_[0].size() : partSize(range_.size(), partOf(m)) * sizeof(float);
      requests[m] = comm_.startReceive(target(m), capacity, first + static_cast<int>(m % workers), kGradTag, &got[m],
                                       context);
    };
    for (std::size_t m = 0; m < slots_.size(); ++m) post(m);
    if (codec_) std::fill_n(update_.sum(), range_.size(), 0.0f);
    comm_.expectLongWait();  // the workers compute first
    double bytes = 0;
    for (std::size_t m = 0; m < messages; ++m) {
      const int rank = first + static_cast<int>(m % workers);
      comm_.wait(requests[m]);
      bytes += static_cast<double>(got[m]);
      if (!codec_) {
        const std::int64_t part = partOf(m), n = partSize(range_.size(), part);
        expectBytes(got[m], n * sizeof(float), rank, "part of the gradient", context);
        const float* values = reinterpret_cast<const float*>(target(m));
        if (!eachPart) {
          if (m % workers) add(update_.sum() + part * kPartFloats, values, n);
        } else {
          if (m % workers == 0) std::copy_n(values, n, partSum_.data());
          if (m % workers) add(partSum_.data(), values, n);
          if (m % workers == static_cast<std::size_t>(workers) - 1) {
            update_.applyPart(partSum_.data(), part * kPartFloats, n, plan, step, comm_.rank());
          }
        }
      } else {
        try {
          codec_->decode(target(m), got[m], decoded_.data());
        } catch (const CodecError& e) {
          throw CodecError(fmt::format("{}: rank {}: {}", context, rank, e.what()));
        }
        add(update_.sum(), decoded_.data(), range_.size());
      }
      post(m + slots_.size());
    }
    bytesIn_ = bytes / workers;
  }

  // RangeUpdate::partial, with this server's traffic and update seconds.
  Partial partial() { return update_.partial(update_.takeUpdateSeconds(), bytesOut_, bytesIn_); }

 private:
  // sum[0, n) += values.
  static void add(float* sum, const float* values, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) sum[i] += values[i];
  }

  comm::Communicator& comm_;
  const config::TrainConfig& cfg_;
  const KeyRange range_;
  RangeUpdate update_;
  std::unique_ptr<codec::Codec> codec_;  // with a gradient codec: decodes the workers' frames of this range
  std::unique_ptr<codec::Codec> weightCodec_;  // with a weight codec: codes this range of the weights
  std::string weightFrame_;                    // its frame of the step, sent to every worker
  std::vector<float> decoded_;
  std::vector<std::vector<char>> slots_;  // raw: two parts per worker; coded: two frames
  std::vector<float> partSum_;            // updating each part: the part's sum
  at::Tensor bf16_;                       // --precision bf16-weights: parts staged as the workers hold them
  double bytesOut_ = 0, bytesIn_ = 0;
};

// Servers 1..K-1: their range, step by step as server 0 says.
void follow(const roles::RoleArgs& args) {
  comm::Communicator& comm = args.comm;
  const int k = comm.rank();
  KeyRange range = rangesOf(args.model, args.cfg)[static_cast<std::size_t>(k)];
  const FloatBuffer weights(static_cast<std::size_t>(range.size()));
  Shard shard(comm, args.cfg, std::move(range), weights.view(0, static_cast<std::int64_t>(weights.size())));
  const Start start = receiveStart(comm, shard.update(), args.model);
  bool training = start.train != 0;
  StepPlan plan = start.plan;
  bool checkpointing = false;  // server 0 writes a checkpoint: serve it after the next down message
  for (std::int64_t step = start.firstStep;; ++step) {
    std::vector<std::size_t> requests;
    const std::string down = fmt::format("step {}", step);
    shard.startWeightsDown(requests, training ? down : "stop");
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
        ranges_(rangesOf(s.model, s.cfg)),
        shard_(s.comm, s.cfg, ranges_[0], s.messages.weights.narrow(0, ranges_[0].begin, ranges_[0].size())),
        partials_(ranges_.size()),
        gather_(comm_, ranges_, *s.optimizer, shard_.update()),
        balancer_(s.cfg.servers, comm_.size() - s.cfg.servers, s.shards, s.cfg.balance()) {
    const std::int64_t workers = comm_.size() - s.cfg.servers;
    tails_.resize(static_cast<std::size_t>(workers) * tailFloats());
    balancer_.write(s_.messages.shares.data_ptr<float>());
  }

  // Every server's range of the (resumed) model and optimizer state; whether the run trains.
  // A run that trains then gives back the memory of the weights outside range 0: their
  // checkpoints and final files take them from their servers (CheckpointGather).
  void start(bool training) {
    sendStarts(comm_, ranges_, {s_.firstStep, training, planOf(s_.firstStep), startSendsWeights(s_)}, s_.messages.weights,
               *s_.optimizer, shard_.update().optimizer());
    if (!training) return;
    float* weights = s_.messages.weights.data_ptr<float>();
    portable::releasePages(weights + ranges_[0].end,
                           static_cast<std::size_t>(ranges_.back().end - ranges_[0].end) * sizeof(float));
  }

  // The next down message: every worker gets this range and the header, buffers and shares.
  void sendDown(const std::string& context) {
    std::vector<std::size_t> requests;
    shard_.startWeightsDown(requests, context);
    const std::size_t tailBytes = static_cast<std::size_t>(s_.messages.downTail.numel()) * sizeof(float);
    for (int w = s_.cfg.servers; w < comm_.size(); ++w) {
      requests.push_back(comm_.startSend(s_.messages.down.data(), sizeof(StepHeader), w, kHeadTag, context));
      requests.push_back(comm_.startSend(s_.messages.downTail.data_ptr<float>(), tailBytes, w, kHeadTag, context));
    }
    for (std::size_t request : requests) comm_.wait(request);
  }

  // The step's gradients, buffers and trailers in, every server's Partial, and the Verdict,
  // told to every server. `gradNorm`: the averaged gradient's norm.
  Verdict exchange(std::int64_t step, double lr, double& gradNorm) {
    const std::string context = fmt::format("step {}", step);
    const StepPlan plan = planOf(step);
    receiveTails(context, plan, step);
    partials_[0] = shard_.partial();
    const bool train = step + 1 < s_.total && !s_.publisher->timeToStop();
    Verdict v;
    v.apply = 1;
    v.lr = lr;
    v.gather = !train || s_.publisher->checkpointsAt(step);
    v.train = train;
    if (train) v.next = planOf(step + 1);
    v = decide(comm_, s_.update, partials_, step, v, gradNorm);
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
      shard_.update().apply(v, step, 0);
      if (v.apply) s_.update.averageBuffers(s_.computing);
    });
    if (eachPart()) time.seconds += partials_[0].updateSeconds;
  }

  bool eachPart() const { return s_.cfg.updatesOnArrival(); }

  // The whole model's weights and optimizer state, from every server's range, into what the
  // Publisher reads (CheckpointGather).
  void gather(const std::string& context) { gather_.gather(s_.messages.weights.data_ptr<float>(), context); }
  CheckpointGather& checkpoints() { return gather_; }

  // One worker's messages as the metrics count them (StepStats), summed over the servers.
  void countTraffic(roles::StepStats& stats) const {
    stats.bytesDown = static_cast<double>(sizeof(StepHeader)) + s_.messages.downTail.numel() * sizeof(float);
    stats.bytesUp = static_cast<double>(tailFloats() * sizeof(float));
    for (const Partial& p : partials_) {
      stats.bytesDown += p.bytesOut;
      stats.bytesUp += p.bytesIn;
    }
    stats.rawBytesDown = static_cast<double>(s_.messages.downBytes());
    stats.rawBytesUp = static_cast<double>(s_.messages.upBytes());
  }

  // Each server's traffic, update time and peak memory, and with --balance each worker's
  // virtual shards, for every metrics line.
  void addServers(metrics::JsonObject& line) const {
    exchanges::addServers(line, partials_, comm_.size() - s_.cfg.servers);
    if (s_.cfg.balance()) line.addRaw("virtual_shards_by_worker", metrics::jsonArray(balancer_.counts()));
  }

 private:
  // What a server updating each part on arrival must know of `step` beforehand: its lr, and
  // its sample count (the shards' batch sizes), which the trailer must confirm.
  StepPlan planOf(std::int64_t step) const {
    return {s_.lr(step), static_cast<double>(s_.shards * s_.sampler.batchSizeAt(step))};
  }

  std::size_t tailFloats() const { return s_.messages.up.size() - static_cast<std::size_t>(s_.messages.grad.numel()); }

  // Every worker's buffers and trailer, summed in worker order into the rest of
  // messages.up; this range's gradients meanwhile (Shard::receiveGradients).
  void receiveTails(const std::string& context, const StepPlan& plan, std::int64_t step) {
    const std::size_t n = tailFloats();
    const int workers = comm_.size() - s_.cfg.servers;
    std::vector<std::size_t> requests, got(static_cast<std::size_t>(workers));
    for (int i = 0; i < workers; ++i) {
      requests.push_back(comm_.startReceive(tails_.data() + i * n, n * sizeof(float), s_.cfg.servers + i, kTailTag,
                                            &got[i], context));
    }
    shard_.receiveGradients(context, plan, step);
    float* sum = s_.messages.up.data() + s_.messages.grad.numel();
    std::fill(sum, sum + n, 0.0f);
    for (int i = 0; i < workers; ++i) {
      comm_.wait(requests[i]);
      expectBytes(got[i], n * sizeof(float), s_.cfg.servers + i, "buffers and trailer", context);
      for (std::size_t j = 0; j < n; ++j) sum[j] += tails_[i * n + j];
    }
  }

  roles::Server& s_;
  comm::Communicator& comm_;
  const std::vector<KeyRange> ranges_;
  Shard shard_;
  std::vector<Partial> partials_;   // by server, of the last step
  std::vector<float> tails_;        // by worker: its buffers and trailer
  CheckpointGather gather_;
  roles::ShareBalancer balancer_;  // --balance: the workers' shares (ranks K on)
};

// Server 0's loop: sync's, range 0 of it, with the other servers told what to do.
void lead(roles::Server& s) {
  Lead lead(s);
  std::int64_t step = s.firstStep;
  bool training = step < s.total && !s.publisher->timeToStop();
  lead.start(training);
  s.setHeader(step, training ? Control::Train : Control::Stop, training ? s.lr(step) : 0);
  lead.sendDown(training ? fmt::format("step {}", step) : s.stopContext);
  s.publisher->setExtras([&](metrics::JsonObject& line) { lead.addServers(line); });
  s.publisher->setRecordSource(
      [&](const void* data, std::size_t bytes, const checkpoint::RecordWrite& write) {
        return lead.checkpoints().recordSource(data, bytes, write);
      });
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
    lead.sendDown(training ? fmt::format("step {}", step) : s.stopContext);
    roles::StepStats stats = period.close(s, s.computing, update, lead.eachPart(), v.apply != 0);
    stats.gradNorm = gradNorm;
    lead.countTraffic(stats);
    s.publisher->record(done, lr, stats);
    if (training) lead.checkpoints().release();
  }
  s.publisher->finish(step);
  lead.checkpoints().release();
}

}  // namespace

void serve(const roles::RoleArgs& args) {
  if (args.comm.rank() != 0) return follow(args);
  roles::runServer(args, lead, [](const roles::Server& s) { return fmt::format("{} servers", s.cfg.servers); }, false);
}

}  // namespace pstrain::exchanges::sharded
