#include "runtime/roles/Probe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/codec/Codec.h"
#include "runtime/metrics/Json.h"
#include "runtime/optim/Sgd.h"
#include "runtime/roles/CostModel.h"
#include "runtime/roles/FlatParameters.h"
#include "runtime/roles/LocalTrainer.h"
#include "runtime/roles/StepMessages.h"
#include "runtime/roles/Training.h"

namespace pstrain::roles {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

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
const std::vector<std::string> kGradientCodecs = {"none", "fp16", "topk:0.01", "powersgd:4"};
const std::vector<std::string> kWeightCodecs = {"none", "fp16"};

// Encodes the flat buffer `values` with `spec` a few times: its bytes and times.
CodecCost costOf(const std::string& spec, const models::Net& model, const at::Tensor& values, bool weights) {
  CodecCost cost;
  if (spec == "none") {
    cost.bytes = static_cast<double>(values.numel() * sizeof(float));
    return cost;
  }
  const bool feedback = !weights && codec::errorFeedbackOn("auto", spec);
  auto c = codec::makeCodec(spec, parameterShapes(model), 1, weights ? "compress-weights" : "compress", feedback);
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

std::string encodeCosts(const std::map<std::string, CodecCost>& costs) {
  std::ostringstream out;
  out.precision(17);
  for (const auto& [spec, c] : costs) out << spec << ' ' << c.bytes << ' ' << c.encodeSeconds << ' ' << c.decodeSeconds << '\n';
  return out.str();
}

std::map<std::string, CodecCost> decodeCosts(const std::string& text) {
  std::map<std::string, CodecCost> costs;
  std::istringstream in(text);
  std::string spec;
  CodecCost c;
  while (in >> spec >> c.bytes >> c.encodeSeconds >> c.decodeSeconds) costs[spec] = c;
  return costs;
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

std::string predictionsJson(const std::vector<Prediction>& predictions) {
  std::string out = "[";
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    const Prediction& p = predictions[i];
    metrics::JsonObject o;
    o.add("mode", p.mode).add("codec", p.gradientCodec).add("weights_codec", p.weightCodec);
    o.add("workers", p.workers).add("step_s", p.stepSeconds).add("samples_per_s", p.samplesPerSecond);
    o.add("efficiency", p.efficiency);
    out += (i ? "," : "") + o.str();
  }
  return out + "]";
}

std::string numbers(const std::vector<double>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + fmt::format("{:.9g}", values[i]);
  return out + "]";
}

}  // namespace

void runProbe(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
              const data::Dataset* train, c10::Device device) {
  const int rank = comm.rank(), size = comm.size();
  const bool server = rank == 0;
  // The computing ranks, as the real run would have them.
  std::vector<int> computing;
  for (int r = 0; r < size; ++r) {
    if (computesGradients(cfg, r)) computing.push_back(r);
  }
  const auto index = std::find(computing.begin(), computing.end(), rank) - computing.begin();
  const std::int64_t parameters = models::parameterCount(model);
  if (server) std::cout << fmt::format("pstrain --probe: timing {} computing rank(s), links and codecs ...", computing.size()) << std::endl;

  // 1. Batches, every computing rank at once.
  comm.barrier("probe: start");
  double computeSeconds = 0;
  std::map<std::string, CodecCost> gradientCosts, weightCosts;
  if (train) {
    StepMessages messages(parameters, bufferCount(model), size, device);
    LocalTrainer trainer(cfg, model, *train, device, messages, static_cast<int>(index),
                         static_cast<int>(computing.size()), rank);
    trainer.loadWeights();
    for (int b = 0; b < kWarmupBatches; ++b) trainer.computeGradient(b, b);
    std::int64_t batch = kWarmupBatches;
    computeSeconds = medianSeconds(kTimedBatches, [&] {
      trainer.computeGradient(batch, batch);
      ++batch;
    });
    // 2. Codecs, on the first computing rank, with a real gradient and the weights.
    if (index == 0) {
      for (const auto& spec : kGradientCodecs) gradientCosts[spec] = costOf(spec, model, messages.grad, false);
      for (const auto& spec : kWeightCodecs) weightCosts[spec] = costOf(spec, model, messages.weights, true);
    }
  }
  // 3. The server's update of the whole model.
  double updateSeconds = 0;
  if (server) {
    at::Tensor weights = torch::randn({parameters}), grad = torch::randn({parameters});
    optim::Sgd sgd({cfg.momentum, cfg.weightDecay, cfg.nesterov});
    sgd.step(weights, grad, 1e-6, 2);
    updateSeconds = medianSeconds(9, [&] { sgd.step(weights, grad, 1e-6, 2); });
  }
  // 4. Each worker's link to rank 0, one at a time (a message of the model's size).
  const std::size_t messageBytes = static_cast<std::size_t>(parameters) * sizeof(float);
  double latency = 0, bandwidth = 0;
  comm.barrier("probe: links");
  for (int peer = 1; peer < size; ++peer) {
    if (server || rank == peer) {
      const auto [l, b] = timeLink(comm, peer, messageBytes);
      if (rank == peer) latency = l, bandwidth = b;
    }
    comm.barrier("probe: links");
  }
  // 5. Everything to rank 0.
  const std::string mine = fmt::format("{:.9g} {:.9g} {:.9g}\n", computeSeconds, latency, bandwidth) +
                           encodeCosts(gradientCosts) + "--\n" + encodeCosts(weightCosts);
  const auto all = comm.gather(mine, 0, "probe: results");
  if (!server) return;

  ProbeMeasurements m;
  m.batchSamples = static_cast<double>(cfg.batchSize);
  m.updateSeconds = updateSeconds;
  std::vector<std::string> hosts;
  for (int r : computing) {
    std::istringstream in(all[static_cast<std::size_t>(r)]);
    double c = 0, l = 0, b = 0;
    in >> c >> l >> b;
    if (r == 0) {  // a computing server (allreduce): its link is a loopback; take its peers' worst
      l = 0, b = 0;
    }
    m.computeSeconds.push_back(c);
    m.latencySeconds.push_back(l);
    m.bytesPerSecond.push_back(b);
  }
  if (computing.front() == 0) {
    double worstL = 0, worstB = 0;
    for (std::size_t i = 1; i < computing.size(); ++i) {
      worstL = std::max(worstL, m.latencySeconds[i]);
      worstB = worstB == 0 ? m.bytesPerSecond[i] : std::min(worstB, m.bytesPerSecond[i]);
    }
    m.latencySeconds[0] = worstL;
    m.bytesPerSecond[0] = worstB > 0 ? worstB : 1e12;  // alone: no link at all
  }
  const std::string& first = all[static_cast<std::size_t>(computing.front())];
  const auto split = first.find("--\n");
  const auto firstLine = first.find('\n');
  m.gradientCodecs = decodeCosts(first.substr(firstLine + 1, split - firstLine - 1));
  m.weightCodecs = decodeCosts(first.substr(split + 3));
  const auto predictions = predict(m);
  const int workers = static_cast<int>(computing.size());

  std::string out = fmt::format("pstrain --probe: {} (batch {} per worker), {} worker(s) measured\n", cfg.model,
                                cfg.batchSize, workers);
  for (int i = 0; i < workers; ++i) {
    out += fmt::format("  rank {:<3} batch {:8.2f} ms   link to rank 0: {:7.3f} ms latency, {:9.1f} MB/s\n",
                       computing[static_cast<std::size_t>(i)], 1e3 * m.computeSeconds[i], 1e3 * m.latencySeconds[i],
                       m.bytesPerSecond[i] / 1e6);
  }
  out += fmt::format("  server update {:.2f} ms; codecs (bytes, encode ms):", 1e3 * m.updateSeconds);
  for (const auto& [spec, c] : m.gradientCodecs) out += fmt::format(" {} {:.0f} {:.2f};", spec, c.bytes, 1e3 * c.encodeSeconds);
  out += "\n  predicted samples/s (efficiency) by workers, each mode with its fastest codecs:\n";
  out += fmt::format("  {:<10}", "mode");
  for (int n = 1; n <= workers; ++n) out += fmt::format(" {:>18}", fmt::format("{} worker(s)", n));
  out += "\n";
  for (const std::string mode : {"sync", "backup", "async", "allreduce"}) {
    out += fmt::format("  {:<10}", mode);
    for (int n = 1; n <= workers; ++n) {
      const Prediction* top = nullptr;
      for (const auto& p : predictions) {
        if (p.mode == mode && p.workers == n && (!top || p.samplesPerSecond > top->samplesPerSecond)) top = &p;
      }
      out += fmt::format(" {:>18}", fmt::format("{:.0f} ({:.2f})", top->samplesPerSecond, top->efficiency));
    }
    out += "\n";
  }
  const Prediction& pick = best(predictions, workers);
  const std::string advice = recommendation(pick, m);
  out += "  recommendation: " + advice + "\n";
  std::cout << out << std::flush;

  metrics::JsonObject measured;
  measured.addRaw("ranks", "[" + fmt::format("{}", fmt::join(computing, ",")) + "]");
  measured.addRaw("compute_s", numbers(m.computeSeconds)).addRaw("latency_s", numbers(m.latencySeconds));
  measured.addRaw("bytes_per_s", numbers(m.bytesPerSecond)).add("update_s", m.updateSeconds);
  auto codecsJson = [](const std::map<std::string, CodecCost>& costs) {
    metrics::JsonObject o;
    for (const auto& [spec, c] : costs) {
      metrics::JsonObject one;
      one.add("bytes", c.bytes).add("encode_s", c.encodeSeconds).add("decode_s", c.decodeSeconds);
      o.addRaw(spec, one.str());
    }
    return o.str();
  };
  measured.addRaw("gradient_codecs", codecsJson(m.gradientCodecs)).addRaw("weight_codecs", codecsJson(m.weightCodecs));
  metrics::JsonObject probe;
  probe.add("model", cfg.model).add("dataset", cfg.dataset).add("batch_size", cfg.batchSize);
  probe.add("device", device.str()).add("mode", cfg.mode);
  probe.addRaw("measured", measured.str()).addRaw("predictions", predictionsJson(predictions));
  probe.add("recommendation", advice);
  std::filesystem::create_directories(cfg.trainDir);
  const std::string path = (std::filesystem::path(cfg.trainDir) / "probe.json").string();
  checkpoint::atomicWrite(path, probe.str() + "\n");
  std::cout << "pstrain --probe: wrote " << path << "; trained nothing" << std::endl;
}

}  // namespace pstrain::roles
