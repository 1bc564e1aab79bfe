#include "runtime/training/MemoryPlan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime/config/Layout.h"
#include "runtime/config/MemoryPolicy.h"
#include "runtime/training/Exchanges.h"

namespace pstrain::training {
namespace {

constexpr double kMib = 1 << 20;

std::string gib(double mib) { return fmt::format("{:.2f} GiB", mib / 1024); }

// Each host's predicted peak with every host under `use`; lean with the spare that
// `spares` gives the host (none: lean's least).
std::map<std::string, double> hostPeaks(const config::TrainConfig& cfg, std::int64_t parameters,
                                        const std::vector<RankMeasure>& ranks, config::MemoryUse use,
                                        const MemoryChoices* spares = nullptr) {
  MemoryChoices all;
  for (const RankMeasure& m : ranks) {
    all[m.host] = {use, "", spares && use == config::MemoryUse::Lean ? spares->at(m.host).leanSpareMib : 0};
  }
  const std::vector<RankMemory> predicted = predictMemory(cfg, parameters, ranks, all);
  std::map<std::string, double> peaks;
  for (std::size_t r = 0; r < ranks.size(); ++r) peaks[ranks[r].host] += predicted[r].peakMib;
  return peaks;
}

}  // namespace

std::vector<RankMemory> predictMemory(const config::TrainConfig& cfg, std::int64_t parameters,
                                      const std::vector<RankMeasure>& ranks) {
  return predictMemory(cfg, parameters, ranks, chooseMemory(cfg, parameters, ranks));
}

std::vector<RankMemory> predictMemory(const config::TrainConfig& cfg, std::int64_t parameters,
                                      const std::vector<RankMeasure>& ranks, const MemoryChoices& choices) {
  const config::Layout layout(cfg, static_cast<int>(ranks.size()));
  const auto n = static_cast<double>(parameters);
  std::vector<RankMemory> out;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const RankMeasure& m = ranks[static_cast<std::size_t>(r)];
    config::RunPlan mine(cfg);  // as the host's ranks run
    mine.memoryChosen = choices.at(m.host).use;
    mine.leanSpareMib = choices.at(m.host).leanSpareMib;
    // Bytes a parameter, the same for every rank of a role and choice: the exchange's own figures.
    const exchanges::Memory held = exchangeFor(mine).memory(mine, layout);
    const config::MemoryPolicy policy(mine);  // the windows and slots its links take
    RankMemory p;
    p.role = layout.serves(r) ? "server" : cfg.modeInfo().peers() ? "peer" : "worker";
    if (layout.serves(r)) {
      // Its state and sums are of the parameters it holds; a server 0 that holds the whole
      // model has state for its range only (about 1/K).
      double range = static_cast<double>(m.held), beyond = 0;
      if (r == 0 && held.leadHoldsAll) {
        range = static_cast<double>(layout.heldBy(0, parameters));
        beyond = held.leadCopy * (n - range);
      }
      const double slots = policy.receiveSlotBytes(m.held, held.slottedWorkers);
      const double extra = (held.server * range + beyond + slots) / kMib;
      p.peakMib = std::max(m.peakMib, m.residentMib + extra);
      // Fast's slots grow with the range; lean's are a few parts a worker.
      const double growing = policy.givesPagesBack() ? 0 : slots;
      p.perParameterBytes = (4 * static_cast<double>(m.held) + held.server * range + beyond + growing) / std::max(n, 1.0);
      p.parts = fmt::format("{} as loaded + {} of optimizer state and sums", gib(m.residentMib), gib(extra));
    } else {
      // A streaming worker's buckets or parts out (StepLink, RangesLink).
      const double inFlight = policy.workerInFlightBytes(4 * n, mine.streamsGradients()) / kMib;
      const double extra = std::max(m.stepMib, 0.0) + inFlight + (held.worker + held.keptGradient) * n / kMib;
      p.peakMib = std::max(m.peakMib, m.residentMib + extra);
      p.perParameterBytes = held.held + held.worker;
      p.parts = m.stepMib < 0 ? fmt::format("{} as loaded, a step not measured", gib(m.residentMib))
                              : fmt::format("{} as loaded + {} a step", gib(m.residentMib), gib(extra));
      if (held.ifOverlapped > 0) p.parts += fmt::format("; {} more if its rounds overlap", gib(held.ifOverlapped * n / kMib));
    }
    out.push_back(p);
  }
  return out;
}

MemoryChoices chooseMemory(const config::TrainConfig& cfg, std::int64_t parameters,
                           const std::vector<RankMeasure>& ranks) {
  MemoryChoices choices;
  if (cfg.memory != config::MemoryUse::Auto) {
    for (const RankMeasure& m : ranks) choices[m.host] = {cfg.memory, fmt::format("--memory {}", nameOf(cfg.memory))};
    return choices;
  }
  // What a start-up knows: no step.
  std::vector<RankMeasure> loaded = ranks;
  for (RankMeasure& m : loaded) m.stepMib = -1;
  const auto underFast = hostPeaks(cfg, parameters, loaded, config::MemoryUse::Fast);
  const auto underLean = hostPeaks(cfg, parameters, loaded, config::MemoryUse::Lean);  // lean's least
  std::map<std::string, double> memoryMib;
  std::map<std::string, int> rankCount;
  for (const RankMeasure& m : ranks) {
    memoryMib[m.host] = m.hostMib;
    ++rankCount[m.host];
  }
  for (const auto& [host, peak] : underFast) {
    const double memory = memoryMib[host];
    MemoryChoice& c = choices[host];
    if (memory <= 0) {
      c = {config::MemoryUse::Fast, "--memory auto: its memory is unknown"};
    } else if (peak <= memory / 2) {
      c = {config::MemoryUse::Fast,
           fmt::format("--memory auto: {} under fast before activations, within half of its {}", gib(peak), gib(memory))};
    } else {
      const int count = rankCount[host];
      c.use = config::MemoryUse::Lean;
      c.leanSpareMib = std::floor(std::max(memory / 2 - underLean.at(host), 0.0) / count);
      c.why = fmt::format("--memory auto: {} under fast before activations, over half of its {}; {}", gib(peak),
                          gib(memory), c.leanSpareMib > 0 ? fmt::format("each of its {} rank(s) may keep {:.0f} MiB more in "
                                                                     "flight than lean's least", count, c.leanSpareMib)
                                                      : "lean's least in flight (no room left under half)");
    }
  }
  return choices;
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

std::string describeMemory(const config::TrainConfig& cfg, std::int64_t parameters,
                           const std::vector<RankMeasure>& ranks, const MemoryChoices& choices) {
  const std::vector<RankMemory> predicted = predictMemory(cfg, parameters, ranks, choices);
  // Each host's peak under either choice (lean with what the plan spares it), beside the one taken.
  auto underFast = hostPeaks(cfg, parameters, ranks, config::MemoryUse::Fast);
  auto underLean = hostPeaks(cfg, parameters, ranks, config::MemoryUse::Lean, &choices);
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
    const MemoryChoice& c = choices.at(name);
    out += fmt::format("  memory    host {}: {} ({}; at the peak {} under fast, {} under lean)\n", name, nameOf(c.use),
                       c.why, gib(underFast[name]), gib(underLean[name]));
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
