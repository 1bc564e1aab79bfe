#include "runtime/config/Layout.h"
#include "runtime/probe/Probe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <type_traits>

#include "runtime/Errors.h"
#include "runtime/codec/Codec.h"
#include "runtime/metrics/Clock.h"
#include "runtime/metrics/Json.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/probe/CostModel.h"
#include "runtime/probe/NetworkMap.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/LocalTrainer.h"
#include "runtime/exchanges/rounds/RoundsPlan.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/RunFiles.h"

namespace pstrain::probe {
namespace {

using metrics::Clock;
using metrics::secondsSince;

template <typename F>
double medianSeconds(int repeats, F&& f) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    f();
    times.push_back(secondsSince(start));
  }
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[static_cast<std::size_t>(repeats / 2)];
}

constexpr int kWarmupBatches = 2, kTimedBatches = 8;
// The probe times each codec row's `probed` spec (config/Codecs.h; raw floats among them,
// which the cost model needs), for weights those rows fit for weights.
bool probed(const config::CodecInfo& row, bool weights) { return row.probed && (!weights || !row.unfitForWeights); }

// Encodes the flat buffer `values` with `spec` a few times: its bytes and times.
CodecCost costOf(const std::string& spec, const models::Net& model, const at::Tensor& values, bool weights) {
  CodecCost cost;
  if (spec == config::kRawCodec) {
    cost.bytes = static_cast<double>(values.numel() * sizeof(float));
    return cost;
  }
  const bool feedback = !weights && config::errorFeedbackOn(config::Switch::Auto, spec);
  auto c = codec::makeCodec(spec, protocol::parameterShapes(model), 1, weights ? "compress-weights" : "compress", feedback);
  const at::Tensor input = values.contiguous().cpu();
  std::string frame;
  cost.encodeSeconds = medianSeconds(5, [&] {
    frame.clear();
    c->encode(input.data_ptr<float>(), frame);
  });
  std::vector<float> out(static_cast<std::size_t>(values.numel()));
  cost.decodeSeconds = medianSeconds(5, [&] { c->decode(frame.data(), frame.size(), out.data()); });
  cost.bytes = static_cast<double>(frame.size());
  return cost;
}

// Rank 0 and `peer` time round trips: small ones (latency) and ones of `bytes` each way
// (bandwidth). Returns {one-way latency, bytes per second} on both ranks.
std::pair<double, double> timeLink(comm::Communicator& comm, int peer, std::size_t bytes) {
  const bool server = comm.rank() == 0;
  const int other = server ? peer : 0;
  std::vector<char> buffer(bytes);
  const std::string context = fmt::format("probe: link between ranks 0 and {}", peer);
  auto roundTrip = [&](std::size_t size) {
    if (server) {
      comm.send(buffer.data(), size, other, context);
      comm.receive(buffer.data(), buffer.size(), other, context);
    } else {
      comm.receive(buffer.data(), buffer.size(), other, context);
      comm.send(buffer.data(), size, other, context);
    }
  };
  for (int i = 0; i < 3; ++i) roundTrip(8);  // connections up
  const double small = medianSeconds(21, [&] { roundTrip(8); });
  roundTrip(bytes);
  const double big = medianSeconds(5, [&] { roundTrip(bytes); });
  const double latency = small / 2;
  const double perByte = std::max(big - small, 1e-9) / (2.0 * static_cast<double>(bytes));
  return {latency, 1.0 / perByte};
}

// What one rank measured, gathered to rank 0 as these bytes (a trivially copyable struct:
// every rank runs the same build). Codec costs are measured on the first computing rank.
struct Measured {
  double computeSeconds = 0;  // a computing rank's median batch
  double latencySeconds = 0;  // a worker's link to rank 0
  double bytesPerSecond = 0;
  double updateSeconds = 0;   // rank 0's update of the whole model
  CodecCost gradientCodecs[config::kCodecCount];  // by row of config::kCodecs; zeros where not probed
  CodecCost weightCodecs[config::kCodecCount];
};
static_assert(std::is_trivially_copyable_v<Measured>, "gathered as bytes");

// The computing ranks, as the real run would have them.
std::vector<int> computingRanks(const config::TrainConfig& cfg, int size) {
  std::vector<int> computing;
  const config::Layout layout(cfg, size);
  for (int r = 0; r < size; ++r) {
    if (layout.computes(r)) computing.push_back(r);
  }
  return computing;
}

// This rank's part, in order: batches (every computing rank at once), the codecs (the first
// computing rank, with a real gradient and the weights), rank 0's update, then each worker's
// link to rank 0, one at a time (messages of the model's size).
Measured measure(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
                 const data::Dataset* train, c10::Device device) {
  const std::vector<int> computing = computingRanks(cfg, comm.size());
  const int index = static_cast<int>(std::find(computing.begin(), computing.end(), comm.rank()) - computing.begin());
  const std::int64_t parameters = models::parameterCount(model);
  Measured mine;
  comm.barrier("probe: start");
  if (train) {
    protocol::StepMessages messages(parameters, protocol::bufferCount(model), comm.size(), device);
    roles::LocalTrainer trainer(cfg, model, *train, device, messages, index, static_cast<int>(computing.size()),
                                comm.rank());
    trainer.loadWeights();
    for (int b = 0; b < kWarmupBatches; ++b) trainer.computeGradient(b, b);
    std::int64_t batch = kWarmupBatches;
    mine.computeSeconds = medianSeconds(kTimedBatches, [&] {
      trainer.computeGradient(batch, batch);
      ++batch;
    });
    if (index == 0) {
      for (std::size_t i = 0; i < config::kCodecCount; ++i) {
        const config::CodecInfo& row = config::kCodecs[i];
        if (probed(row, false)) mine.gradientCodecs[i] = costOf(row.probed, model, messages.grad, false);
        if (probed(row, true)) mine.weightCodecs[i] = costOf(row.probed, model, messages.weights, true);
      }
    }
  }
  if (comm.rank() == 0) {
    at::Tensor weights = torch::randn({parameters}), grad = torch::randn({parameters});
    const auto optimizer = optim::makeOptimizer(cfg, protocol::parameterShapes(model));
    optimizer->step(weights, grad, 1e-6, 2);
    mine.updateSeconds = medianSeconds(9, [&] { optimizer->step(weights, grad, 1e-6, 2); });
  }
  const std::size_t messageBytes = static_cast<std::size_t>(parameters) * sizeof(float);
  comm.barrier("probe: links");
  for (int peer = 1; peer < comm.size(); ++peer) {
    if (comm.rank() == 0 || comm.rank() == peer) {
      const auto [latency, bandwidth] = timeLink(comm, peer, messageBytes);
      if (comm.rank() == peer) mine.latencySeconds = latency, mine.bytesPerSecond = bandwidth;
    }
    comm.barrier("probe: links");
  }
  return mine;
}

// Every rank's Measured, on rank 0 (empty elsewhere).
std::vector<Measured> gather(comm::Communicator& comm, const Measured& mine) {
  const auto all = comm.gather(std::string(reinterpret_cast<const char*>(&mine), sizeof mine), 0, "probe: results");
  std::vector<Measured> out;
  for (const auto& bytes : all) {
    if (bytes.size() != sizeof(Measured)) throw Error(fmt::format("probe: a rank sent {} bytes of results", bytes.size()));
    Measured m;
    std::memcpy(static_cast<void*>(&m), bytes.data(), sizeof m);
    out.push_back(m);
  }
  return out;
}

// The cost model's input from every rank's measurements. A computing rank 0 (peer modes) has
// no link of its own to rank 0: it gets the worst of its peers' (none alone).
ProbeMeasurements costInputs(const config::TrainConfig& cfg, const std::vector<int>& computing,
                             const std::vector<Measured>& all) {
  ProbeMeasurements m;
  m.batchSamples = static_cast<double>(cfg.shardBatch());
  m.updateSeconds = all[0].updateSeconds;
  double worstLatency = 0, worstBandwidth = 0;
  for (int r : computing) {
    const Measured& rank = all[static_cast<std::size_t>(r)];
    m.computeSeconds.push_back(rank.computeSeconds);
    m.latencySeconds.push_back(r == 0 ? 0 : rank.latencySeconds);
    m.bytesPerSecond.push_back(r == 0 ? 0 : rank.bytesPerSecond);
    if (r != 0) {
      worstLatency = std::max(worstLatency, rank.latencySeconds);
      worstBandwidth = worstBandwidth == 0 ? rank.bytesPerSecond : std::min(worstBandwidth, rank.bytesPerSecond);
    }
  }
  if (computing.front() == 0) {
    m.latencySeconds[0] = worstLatency;
    m.bytesPerSecond[0] = worstBandwidth > 0 ? worstBandwidth : 1e12;
  }
  const Measured& first = all[static_cast<std::size_t>(computing.front())];
  for (std::size_t i = 0; i < config::kCodecCount; ++i) {
    const config::CodecInfo& row = config::kCodecs[i];
    if (probed(row, false)) m.gradientCodecs[row.probed] = first.gradientCodecs[i];
    if (probed(row, true)) m.weightCodecs[row.probed] = first.weightCodecs[i];
  }
  if (cfg.fixedLocalSteps() > 0) m.localSteps = cfg.fixedLocalSteps();
  return m;
}

// diloco's H from one step to DiLoCo's 500.
const std::vector<std::int64_t> kLocalSteps = {1, 2, 5, 10, 20, 50, 100, 200, 500};

// What --local-steps auto and --overlap-rounds auto would decide on the measured links for
// `workers` workers (exchanges/rounds/RoundsPlan.h, as the run decides it from its first rounds),
// with the configured codings (diloco's by default); its exchange's seconds too.
struct AutoRounds {
  exchanges::rounds::RoundsDecision decision;
  double stepSeconds = 0, exchangeSeconds = 0;
  // Its predicted time to a loss, as one worker's time over its own and as sync's over its
  // own (>1: sooner); 0 where not predicted (withTimeToLoss).
  double timesOneWorker = 0, timesSync = 0;
};
AutoRounds autoRounds(const config::TrainConfig& cfg, const ProbeMeasurements& m, int workers) {
  config::TrainConfig diloco = cfg;
  diloco.mode = config::Mode::Diloco;
  const exchanges::rounds::RoundsPlan plan = exchanges::rounds::roundsPlanOf(diloco);
  AutoRounds a;
  a.stepSeconds = slowestBatchSeconds(m, workers);
  try {
    a.exchangeSeconds = roundExchangeSeconds(m, workers, plan.codecs.up, plan.codecs.down);
  } catch (const std::invalid_argument&) {  // codecs the probe does not time: uncompressed
    a.exchangeSeconds = roundExchangeSeconds(m, workers, config::kRawCodec, config::kRawCodec);
  }
  a.decision = exchanges::rounds::chooseRounds(plan, a.stepSeconds, a.exchangeSeconds);
  return a;
}

// The fastest prediction (of its codecs) of `mode` with `servers` servers and `workers`
// workers; null where none was predicted.
const Prediction* fastestOf(const std::vector<Prediction>& predictions, config::Mode mode, int servers, int workers) {
  const Prediction* top = nullptr;
  for (const auto& p : predictions) {
    if (p.mode == mode && p.servers == servers && p.workers == workers &&
        (!top || p.samplesPerSecond > top->samplesPerSecond)) {
      top = &p;
    }
  }
  return top;
}

// `a` with its predicted time to a loss against one worker's and sync's (RoundsPlan.h's
// model: `workers` workers in sync need 1/workers of one worker's steps, rounds of H local
// steps roundsSteps(H) times sync's), where auto decided H (a.decision.predicted).
AutoRounds withTimeToLoss(AutoRounds a, const ProbeMeasurements& m, const std::vector<Prediction>& predictions,
                          int workers) {
  const Prediction* sync = fastestOf(predictions, config::Mode::Sync, 1, workers);
  if (a.decision.predicted <= 0 || !sync) return a;
  const double fastest = *std::min_element(m.computeSeconds.begin(), m.computeSeconds.end());
  a.timesOneWorker = workers * fastest / a.decision.predicted;
  a.timesSync = sync->stepSeconds / a.decision.predicted;
  return a;
}

// diloco's predictions by H, and what its defaults would choose and why, and its predicted
// time to a loss.
std::string localStepsLine(const std::vector<LocalStepsPrediction>& rounds, const ProbeMeasurements& m,
                           const AutoRounds& chosen) {
  const double alone = m.batchSamples / *std::min_element(m.computeSeconds.begin(), m.computeSeconds.end());
  std::string out = "  diloco by --local-steps H, fastest codecs: samples/s (x one worker, communication share):\n   ";
  for (const auto& r : rounds) {
    out += fmt::format(" H={}: {:.0f} ({:.2f}x, {:.0f}%);", r.localSteps, r.prediction.samplesPerSecond,
                       r.prediction.samplesPerSecond / alone, 100 * r.commShare);
  }
  const auto& d = chosen.decision;
  out += fmt::format("\n  diloco: --local-steps auto would take {} local steps a round{} (a step {:.3f} s, the round's "
                     "exchange {:.3f} s): {}\n", d.localSteps,
                     d.overlap ? ", each round's exchange hidden behind the next" : ", rounds not overlapped",
                     chosen.stepSeconds, chosen.exchangeSeconds, exchanges::rounds::whyRounds(d));
  if (chosen.timesOneWorker > 0) {
    out += fmt::format("  diloco: reaches a loss {:.2f}x as fast as one worker and {:.2f}x as fast as sync (predicted)\n",
                       chosen.timesOneWorker, chosen.timesSync);
  }
  return out;
}

// The table of predictions: for each predicted mode, its fastest codecs' samples/s
// (efficiency) by workers.
std::string predictionTable(const std::vector<Prediction>& predictions, int workers) {
  std::string out = "  predicted samples/s (efficiency) by workers, each mode with its fastest codecs:\n";
  out += fmt::format("  {:<16}", "mode");
  for (int n = 1; n <= workers; ++n) out += fmt::format(" {:>18}", fmt::format("{} worker(s)", n));
  out += "\n";
  auto row = [&](config::Mode mode, int servers, const std::string& name) {
    out += fmt::format("  {:<16}", name);
    for (int n = 1; n <= workers; ++n) {
      const Prediction* top = fastestOf(predictions, mode, servers, n);
      out += fmt::format(" {:>18}", fmt::format("{:.0f} ({:.2f})", top->samplesPerSecond, top->efficiency));
    }
    out += "\n";
  };
  for (const config::ModeInfo& mode : config::modes()) {
    if (predictable(mode.mode)) row(mode.mode, 1, mode.name);
  }
  for (const config::ModeInfo& mode : config::modes()) {  // the modes predicted with K servers (CostModel.h)
    for (int servers : kShardedServers) {
      const auto predicted = [&](const Prediction& p) { return p.mode == mode.mode && p.servers == servers; };
      if (std::any_of(predictions.begin(), predictions.end(), predicted)) {
        row(mode.mode, servers, fmt::format("{}, {} servers", mode.name, servers));
      }
    }
  }
  return out;
}

// The prediction for the run as configured with `workers`: its mode (sync where the cost
// model has none for it) and its codecs where the probe timed them, else uncompressed; with
// its servers where the cost model predicts that many, else one.
const Prediction& asConfigured(const std::vector<Prediction>& predictions, const config::TrainConfig& cfg, int workers) {
  const config::Mode mode = predictable(cfg.mode) ? cfg.mode : config::Mode::Sync;
  const int given = std::max(1, config::Layout(cfg, 0).servers());  // the cost model's peers count as one server
  const bool predicted = std::any_of(predictions.begin(), predictions.end(), [&](const Prediction& p) {
    return p.mode == mode && p.servers == given;
  });
  const int servers = predicted ? given : 1;
  const Prediction* raw = nullptr;
  for (const auto& p : predictions) {
    if (p.mode != mode || p.workers != workers || p.servers != servers) continue;
    const bool peers = config::info(p.mode).peers();
    if (p.gradientCodec == cfg.gradientCodec() && (peers || p.weightCodec == cfg.weightCodec())) return p;
    if (p.gradientCodec == config::kRawCodec && (peers || p.weightCodec == config::kRawCodec)) raw = &p;
  }
  return *raw;
}

// What the network map says, printed (`text`) and for probe.json's "network" (`json`).
struct NetworkAdvice {
  std::string text;
  std::string json;
};
constexpr double kFasterPath = 1.2;  // a subnet this much faster than what MPI measured is worth naming

// Where rank `rank`'s link is in the cost model's per-worker vectors (ordered as `computing`);
// -1 for a rank that does not compute.
int linkIndex(const std::vector<int>& computing, int rank) {
  const auto at = std::find(computing.begin(), computing.end(), rank);
  return at == computing.end() ? -1 : static_cast<int>(at - computing.begin());
}

// One worker's subnets with rank 0 and MPI's rate: its line, a `faster path` line when a
// subnet beats MPI's rate, and its item of probe.json's "workers".
void describeWorker(const WorkerNetwork& w, double mpiRate, NetworkAdvice& advice, std::vector<std::string>& items) {
  std::string line = fmt::format("  network: rank {} ({}) to rank 0:", w.rank, w.host);
  std::vector<std::string> subnets;
  const SharedSubnet* fastest = nullptr;
  for (const SharedSubnet& s : w.subnets) {
    const std::string kind = s.kind.empty() ? "" : s.kind + (s.megabitsPerSecond > 0 ? fmt::format(" {:.0f} Mbit/s", s.megabitsPerSecond) : "");
    line += w.sameHostAsServer ? "" : fmt::format(" {}{} {:.1f} MB/s;", s.subnet, kind.empty() ? "" : " (" + kind + ")",
                                                   s.bytesPerSecond / 1e6);
    if (!fastest || s.bytesPerSecond > fastest->bytesPerSecond) fastest = &s;
    metrics::JsonObject o;
    o.add("subnet", s.subnet).add("kind", s.kind).add("link_mbit_s", s.megabitsPerSecond);
    o.add("server_address", s.serverAddress).add("worker_address", s.workerAddress).add("bytes_per_s", s.bytesPerSecond);
    subnets.push_back(o.str());
  }
  if (w.sameHostAsServer) line += " the same host (MPI uses shared memory)";
  else if (w.subnets.empty()) line += " no subnet in common (MPI's traffic is routed)";
  else line += fmt::format(" MPI measured {:.1f} MB/s", mpiRate / 1e6);
  advice.text += line + "\n";
  if (!w.sameHostAsServer && fastest && fastest->bytesPerSecond > kFasterPath * mpiRate) {
    advice.text += fmt::format("  faster path: rank {} ({}) reaches rank 0 at {:.1f} MB/s on {} ({} there), {:.1f}x what MPI "
                               "got: --mca btl_tcp_if_include {}\n",
                               w.rank, w.host, fastest->bytesPerSecond / 1e6, fastest->subnet, fastest->workerAddress,
                               fastest->bytesPerSecond / std::max(mpiRate, 1.0), fastest->subnet);
  }
  metrics::JsonObject o;
  o.add("rank", w.rank).add("host", w.host).add("same_host", w.sameHostAsServer).add("mpi_bytes_per_s", mpiRate);
  o.addRaw("subnets", metrics::jsonRawArray(subnets));
  items.push_back(o.str());
}

// Each worker's subnets with rank 0, a line per worker that has a faster path than MPI's,
// and, when one subnet is faster for all of them, the mpirun option that gives MPI that
// subnet alone and the run's predicted throughput with it (`predictions`: with MPI's rates).
NetworkAdvice adviseNetwork(const config::TrainConfig& cfg, const std::vector<int>& computing, const ProbeMeasurements& m,
                            const std::vector<Prediction>& predictions, const std::vector<WorkerNetwork>& network) {
  NetworkAdvice advice;
  auto mpiRate = [&](int rank) {
    const int i = linkIndex(computing, rank);
    return i < 0 ? 0.0 : m.bytesPerSecond[static_cast<std::size_t>(i)];
  };
  std::vector<std::string> items;
  double slowestMpi = 0;
  for (const WorkerNetwork& w : network) {
    describeWorker(w, mpiRate(w.rank), advice, items);
    if (!w.sameHostAsServer) slowestMpi = slowestMpi == 0 ? mpiRate(w.rank) : std::min(slowestMpi, mpiRate(w.rank));
  }
  metrics::JsonObject json;
  json.addRaw("workers", metrics::jsonRawArray(items));
  const FastestSubnet best = fastestCommonSubnet(network);
  if (!best.subnet.empty() && best.bytesPerSecond > kFasterPath * slowestMpi) {
    ProbeMeasurements faster = m;  // each remote worker's link at its rate on that subnet
    for (const WorkerNetwork& w : network) {
      const int i = linkIndex(computing, w.rank);
      for (const SharedSubnet& s : w.subnets) {
        if (s.subnet == best.subnet && i >= 0 && !w.sameHostAsServer) faster.bytesPerSecond[static_cast<std::size_t>(i)] = s.bytesPerSecond;
      }
    }
    if (computing.front() == 0) faster.bytesPerSecond[0] = best.bytesPerSecond;  // a computing rank 0: its peers' worst
    const int workers = static_cast<int>(computing.size());
    const auto fasterPredictions = predict(faster);
    const Prediction& now = asConfigured(predictions, cfg, workers);
    const Prediction& then = asConfigured(fasterPredictions, cfg, workers);
    const std::string option = "--mca btl_tcp_if_include " + best.subnet;
    const auto addresses = addressesOn(network, best.subnet);
    advice.text += fmt::format("  network recommendation: mpirun {} (the hostfile's addresses on it: {}): predicted {} {:.0f} "
                               "samples/s instead of {:.0f} ({:.2f}x)\n",
                               option, fmt::join(addresses, " "), config::nameOf(then.mode), then.samplesPerSecond,
                               now.samplesPerSecond, then.samplesPerSecond / now.samplesPerSecond);
    metrics::JsonObject r;
    r.add("subnet", best.subnet).add("option", option).addRaw("hostfile_addresses", metrics::jsonArray(addresses));
    r.add("mode", config::nameOf(then.mode)).add("samples_per_s", then.samplesPerSecond).add("samples_per_s_now", now.samplesPerSecond);
    json.addRaw("recommendation", r.str());
  } else if (!network.empty()) {
    advice.text += "  network: MPI's path is the fastest the probe found\n";
  }
  advice.json = json.str();
  return advice;
}

std::string probeJson(const config::TrainConfig& cfg, c10::Device device, const std::vector<int>& computing,
                      const ProbeMeasurements& m, const std::vector<Prediction>& predictions, const std::string& advice,
                      const std::vector<LocalStepsPrediction>& rounds, const AutoRounds& chosen,
                      const std::string& network) {
  auto codecsJson = [](const std::map<std::string, CodecCost>& costs) {
    metrics::JsonObject o;
    for (const auto& [spec, c] : costs) {
      metrics::JsonObject one;
      one.add("bytes", c.bytes).add("encode_s", c.encodeSeconds).add("decode_s", c.decodeSeconds);
      o.addRaw(spec, one.str());
    }
    return o.str();
  };
  metrics::JsonObject measured;
  measured.addRaw("ranks", metrics::jsonArray(computing));
  measured.addRaw("compute_s", metrics::jsonArray(m.computeSeconds)).addRaw("latency_s", metrics::jsonArray(m.latencySeconds));
  measured.addRaw("bytes_per_s", metrics::jsonArray(m.bytesPerSecond)).add("update_s", m.updateSeconds);
  measured.addRaw("gradient_codecs", codecsJson(m.gradientCodecs)).addRaw("weight_codecs", codecsJson(m.weightCodecs));
  std::vector<std::string> items;
  for (const Prediction& p : predictions) {
    metrics::JsonObject o;
    o.add("mode", config::nameOf(p.mode)).add("codec", p.gradientCodec).add("weights_codec", p.weightCodec);
    o.add("workers", p.workers).add("servers", p.servers).add("step_s", p.stepSeconds).add("samples_per_s", p.samplesPerSecond);
    o.add("efficiency", p.efficiency);
    items.push_back(o.str());
  }
  metrics::JsonObject probe;
  probe.add("model", cfg.model).add("dataset", cfg.dataset).add("batch_size", cfg.shardBatch()).add("grad_accum", cfg.gradAccum);
  probe.add("device", device.str()).add("mode", config::nameOf(cfg.mode));
  probe.addRaw("measured", measured.str()).addRaw("predictions", metrics::jsonRawArray(items));
  probe.add("recommendation", advice);
  std::vector<std::string> byLocalSteps;
  for (const auto& r : rounds) {
    metrics::JsonObject o;
    o.add("local_steps", r.localSteps).add("samples_per_s", r.prediction.samplesPerSecond);
    o.add("comm_share", r.commShare).add("codec", r.prediction.gradientCodec).add("weights_codec", r.prediction.weightCodec);
    byLocalSteps.push_back(o.str());
  }
  probe.addRaw("diloco", metrics::jsonRawArray(byLocalSteps));
  probe.add("diloco_local_steps", chosen.decision.localSteps).add("diloco_overlap", chosen.decision.overlap);
  if (chosen.timesOneWorker > 0) {
    probe.add("diloco_time_to_loss_x_one_worker", chosen.timesOneWorker).add("diloco_time_to_loss_x_sync", chosen.timesSync);
  }
  probe.addRaw("network", network);
  return probe.str();
}

// Rank 0: the measurements, the predictions and the recommendation, printed and written to
// probe.json.
void report(const config::TrainConfig& cfg, c10::Device device, const std::vector<Measured>& all,
            const std::vector<WorkerNetwork>& network) {
  const std::vector<int> computing = computingRanks(cfg, static_cast<int>(all.size()));
  const ProbeMeasurements m = costInputs(cfg, computing, all);
  const auto predictions = predict(m);
  const int workers = static_cast<int>(computing.size());
  std::string out = fmt::format("pstrain --probe: {} (batch {} per worker), {} worker(s) measured\n", cfg.model,
                                cfg.describeBatch(), workers);
  for (int i = 0; i < workers; ++i) {
    out += fmt::format("  rank {:<3} batch {:8.2f} ms   link to rank 0: {:7.3f} ms latency, {:9.1f} MB/s\n",
                       computing[static_cast<std::size_t>(i)], 1e3 * m.computeSeconds[i], 1e3 * m.latencySeconds[i],
                       m.bytesPerSecond[i] / 1e6);
  }
  out += fmt::format("  server update {:.2f} ms; codecs (bytes, encode ms):", 1e3 * m.updateSeconds);
  for (const auto& [spec, c] : m.gradientCodecs) out += fmt::format(" {} {:.0f} {:.2f};", spec, c.bytes, 1e3 * c.encodeSeconds);
  out += "\n" + predictionTable(predictions, workers);
  const std::string advice = recommendation(best(predictions, workers), m);
  out += "  recommendation: " + advice + "\n";
  const auto rounds = predictLocalSteps(m, workers, kLocalSteps);
  const AutoRounds chosen = withTimeToLoss(autoRounds(cfg, m, workers), m, predictions, workers);
  out += localStepsLine(rounds, m, chosen);
  const NetworkAdvice net = adviseNetwork(cfg, computing, m, predictions, network);
  out += net.text;
  std::cout << out << std::flush;
  const std::string path = rundir::pathOf(cfg.trainDir, rundir::kProbe);
  rundir::atomicWrite(path, probeJson(cfg, device, computing, m, predictions, advice, rounds, chosen, net.json) + "\n");
  std::cout << "pstrain --probe: wrote " << path << "; trained nothing" << std::endl;
}

}  // namespace

void runProbe(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
              const data::Dataset* train, c10::Device device, const training::RunInfo& info) {
  const training::StartedRun started = training::startRun(comm, cfg, model, train, device, info);
  const config::TrainConfig& run = started.run;
  if (comm.rank() == 0) {
    std::cout << fmt::format("pstrain --probe: timing {} computing rank(s), links and codecs ...",
                             config::Layout(run, comm.size()).workers()) << std::endl;
  }
  const auto all = gather(comm, measure(comm, run, model, train, device));
  // The map's transfers: a model's message, at least 8 MiB (TCP's slow start) and at most
  // 256 MiB, for at most 2 s a subnet.
  const auto modelBytes = static_cast<std::size_t>(models::parameterCount(model)) * sizeof(float);
  const auto network = mapNetwork(comm, std::clamp<std::size_t>(modelBytes, 8u << 20, 256u << 20), 2.0);
  if (comm.rank() == 0) report(run, device, all, network);
}

}  // namespace pstrain::probe
