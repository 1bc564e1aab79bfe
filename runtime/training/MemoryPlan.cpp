#include "runtime/training/MemoryPlan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "runtime/Parts.h"
#include "runtime/codec/Codec.h"
#include "runtime/config/Codecs.h"
#include "runtime/config/Mode.h"
#include "runtime/config/Optimizers.h"
#include "runtime/exchanges/rounds/RoundsMemory.h"

namespace pstrain::training {
namespace {

constexpr double kMib = 1 << 20;
// A worker's gradient in flight: StepLink and the sharded worker keep at most 16 MiB out.
constexpr double kInFlightMib = 16;
// A sharded server's ring: two parts per worker (sharded/Wire.h).
constexpr double kPartMib = static_cast<double>(kPartBytes) / kMib;

// Bytes per parameter of `rule`'s state (torch.optim's moments; SGD's momentum only with it).
double stateBytes(const config::TrainConfig& rule) {
  const config::OptimizerInfo& info = config::optimizerInfo(rule.optimizer);
  if (info.momentum && rule.momentum == 0) return 0;
  return 4.0 * static_cast<double>(info.state.size());
}

// The outer optimizer's state a parameter, where the local-rounds exchange has one.
double outerStateBytes(const config::TrainConfig& cfg) {
  return cfg.modeInfo().runsLocalRounds() ? stateBytes(cfg.updateRule()) : 0;
}

// Bytes per parameter that a gradient codec adds on the rank that encodes: the error
// feedback's residual (int8 codes under a codec that rounds, else float32).
double codecBytes(const config::TrainConfig& cfg) {
  if (!cfg.compressesGradients()) return 0;
  const std::string spec = cfg.gradientCodec();
  return config::errorFeedbackOn(cfg.errorFeedback, spec) ? codec::residualBytes(spec) : 0;
}

// What the dry run did not allocate on a server, per parameter it holds: the optimizer's
// state, and where the gradient is summed (not in a ring of buckets), and the bfloat16
// weights it sends from a copy. (The local rounds' servers: exchanges::rounds::roundsMemory.)
double serverBytes(const config::TrainConfig& cfg, int servers) {
  const double state = stateBytes(cfg);
  // One server converts the whole weights to bfloat16 as it sends them; K servers a few parts.
  const double bf16 = cfg.bf16Weights() && servers == 1 ? 2 : 0;
  // Point to point: a gradient received, and the sum.
  if (cfg.modeInfo().exchange == config::Exchange::PointToPoint) return state + 8 + bf16;
  return state + (cfg.updatesOnArrival() ? 0 : 4) + bf16;
}

// What a computing rank holds beyond its measured step, per parameter: a codec's residual;
// a peer's optimizer. (The local rounds' workers: exchanges::rounds::roundsMemory.)
double workerBytes(const config::TrainConfig& cfg) {
  double bytes = codecBytes(cfg);
  if (cfg.modeInfo().peers()) bytes += stateBytes(cfg);
  return bytes;
}

// The bytes per parameter of the weights as a computing rank holds them, and of the whole
// gradient where it keeps one through the step (no stream of buckets; the local rounds'
// gradient lives from backward to the step only: in the measured step).
double heldBytes(const config::TrainConfig& cfg) {
  const double weights = cfg.bf16Weights() ? 2 : 4;
  const config::Exchange exchange = cfg.modeInfo().exchange;
  return weights + (cfg.streamsGradients() || exchange == config::Exchange::LocalRounds ? 0 : 4);
}

std::string gib(double mib) { return fmt::format("{:.2f} GiB", mib / 1024); }

}  // namespace

std::vector<RankMemory> predictMemory(const config::TrainConfig& cfg, std::int64_t parameters,
                                      const std::vector<RankMeasure>& ranks) {
  const int servers = cfg.modeInfo().peers() ? 0 : cfg.servers;
  const auto n = static_cast<double>(parameters);
  // Bytes a parameter, the same for every rank of a role (once: the rounds' make codecs to
  // size their frames).
  const bool rounds = cfg.modeInfo().exchange == config::Exchange::LocalRounds;
  const exchanges::rounds::RoundsMemory local =
      rounds ? exchanges::rounds::roundsMemory(cfg, stateBytes(cfg), outerStateBytes(cfg)) : exchanges::rounds::RoundsMemory{};
  const double server = rounds ? local.server : serverBytes(cfg, servers),
               worker = rounds ? local.worker : workerBytes(cfg), held = heldBytes(cfg),
               ifOverlapped = local.ifOverlapped, lead = local.leadCopy;
  std::vector<RankMemory> out;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const RankMeasure& m = ranks[static_cast<std::size_t>(r)];
    RankMemory p;
    const bool serves = r < servers;
    p.role = serves ? "server" : servers == 0 ? "peer" : "worker";
    if (serves) {
      // Its state and sums are of the parameters it holds; server 0 of the rounds with K > 1
      // holds the whole model (it runs the rounds), but state for its range only (about 1/K).
      double range = static_cast<double>(m.held), beyond = 0;
      if (rounds && servers > 1 && r == 0) {
        range = n / servers;
        beyond = lead * (n - range);
      }
      const double extra = (server * range + beyond) / kMib +
                           (servers > 1 && !rounds ? kPartMib * 2 * static_cast<double>(ranks.size() - servers) : 0);
      p.peakMib = std::max(m.peakMib, m.residentMib + extra);
      p.perParameterBytes = (4 * static_cast<double>(m.held) + server * range + beyond) / std::max(n, 1.0);
      p.parts = fmt::format("{} as loaded + {} of optimizer state and sums", gib(m.residentMib), gib(extra));
    } else {
      const double extra = std::max(m.stepMib, 0.0) + kInFlightMib + worker * n / kMib;
      p.peakMib = std::max(m.peakMib, m.residentMib + extra);
      p.perParameterBytes = held + worker;
      p.parts = m.stepMib < 0 ? fmt::format("{} as loaded, a step not measured", gib(m.residentMib))
                              : fmt::format("{} as loaded + {} a step", gib(m.residentMib), gib(extra));
      if (ifOverlapped > 0) p.parts += fmt::format("; {} more if its rounds overlap", gib(ifOverlapped * n / kMib));
    }
    out.push_back(p);
  }
  return out;
}

namespace {

struct Host {
  std::vector<int> ranks;
  double memoryMib = 0, peakMib = 0, perParameterBytes = 0;
};

std::map<std::string, Host> hostsOf(const std::vector<RankMeasure>& ranks, const std::vector<RankMemory>& predicted) {
  std::map<std::string, Host> hosts;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    Host& h = hosts[ranks[r].host];
    h.ranks.push_back(static_cast<int>(r));
    h.memoryMib = ranks[r].hostMib;
    h.peakMib += predicted[r].peakMib;
    h.perParameterBytes += predicted[r].perParameterBytes;
  }
  return hosts;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

}  // namespace

std::string describeMemory(std::int64_t parameters, const std::vector<RankMeasure>& ranks,
                           const std::vector<RankMemory>& predicted) {
  std::string out;
  bool measured = true;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const bool computes = predicted[r].role != "server";
    if (computes && ranks[r].stepMib < 0) measured = false;
    out += fmt::format("  memory    rank {:<4} {:<7} {} at its peak ({:.1f} bytes a parameter; {}{})\n", r,
                       predicted[r].role, gib(predicted[r].peakMib), predicted[r].perParameterBytes, predicted[r].parts,
                       predicted[r].peakMib == ranks[r].peakMib ? ": the start-up's" : "");
  }
  const auto hosts = hostsOf(ranks, predicted);
  double largest = -1;
  std::string binding;
  for (const auto& [name, h] : hosts) {
    const bool fits = h.memoryMib <= 0 || h.peakMib <= h.memoryMib;
    out += fmt::format("  memory    host {} (ranks {}): {} of its {}{}\n", name, rankList(h.ranks), gib(h.peakMib),
                       h.memoryMib > 0 ? gib(h.memoryMib) : "unknown memory", fits ? "" : ": DOES NOT FIT");
    if (h.memoryMib <= 0 || h.perParameterBytes <= 0) continue;
    const double fixedMib = h.peakMib - h.perParameterBytes * static_cast<double>(parameters) / kMib;
    const double most = (h.memoryMib - fixedMib) * kMib / h.perParameterBytes;
    if (largest < 0 || most < largest) {
      largest = std::max(most, 0.0);
      binding = name;
    }
  }
  if (largest >= 0) {
    out += fmt::format("  memory    the largest model this layout could train: about {:.0f} M parameters (host {}'s "
                       "memory binds; with this model's activations)\n", largest / 1e6, binding);
  }
  if (!measured) {
    out += "  memory    the workers' activations are not counted: a worker that loads no data cannot run a step\n";
  }
  return out;
}

std::vector<std::string> hostsThatDoNotFit(const std::vector<RankMeasure>& ranks,
                                           const std::vector<RankMemory>& predicted) {
  std::vector<std::string> lines;
  for (const auto& [name, h] : hostsOf(ranks, predicted)) {
    if (h.memoryMib <= 0 || h.peakMib <= h.memoryMib) continue;
    lines.push_back(fmt::format("host {}: {} predicted at its peak (ranks {}), it has {}", name, gib(h.peakMib),
                                rankList(h.ranks), gib(h.memoryMib)));
  }
  return lines;
}

}  // namespace pstrain::training
