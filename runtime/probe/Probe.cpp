#include "runtime/probe/Probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "runtime/config/Layout.h"
#include "runtime/metrics/Json.h"
#include "runtime/probe/CostModel.h"
#include "runtime/probe/Measure.h"
#include "runtime/probe/NetworkAdvice.h"
#include "runtime/probe/NetworkMap.h"
#include "runtime/probe/Predictions.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/RunFiles.h"

namespace pstrain::probe {
namespace {

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
    for (int servers : kServerCounts) {
      const auto predicted = [&](const Prediction& p) { return p.mode == mode.mode && p.servers == servers; };
      if (std::any_of(predictions.begin(), predictions.end(), predicted)) {
        row(mode.mode, servers, fmt::format("{}, {} servers", mode.name, servers));
      }
    }
  }
  return out;
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

void runProbe(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
              const data::Dataset* train, c10::Device device, const training::RunInfo& info) {
  const training::StartedRun started = training::startRun(comm, cfg, model, train, device, info);
  const config::RunPlan& run = started.run;
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
