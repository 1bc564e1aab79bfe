#include "runtime/probe/Measure.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "runtime/Errors.h"
#include "runtime/codec/Codec.h"
#include "runtime/config/Layout.h"
#include "runtime/metrics/Clock.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/LocalTrainer.h"

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

}  // namespace

std::vector<int> computingRanks(const config::TrainConfig& cfg, int size) {
  std::vector<int> computing;
  const config::Layout layout(cfg, size);
  for (int r = 0; r < size; ++r) {
    if (layout.computes(r)) computing.push_back(r);
  }
  return computing;
}

Measured measure(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
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

}  // namespace pstrain::probe
