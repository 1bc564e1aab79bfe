#include "runtime/training/MemoryPlan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "runtime/config/Layout.h"
#include "runtime/training/Exchanges.h"

namespace pstrain::training {
namespace {

constexpr double kMib = 1 << 20;
// A worker's gradient in flight: StepLink and the sharded worker keep at most 16 MiB out.
constexpr double kInFlightMib = 16;

std::string gib(double mib) { return fmt::format("{:.2f} GiB", mib / 1024); }

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
    config::TrainConfig mine = cfg;
    mine.memory = choices.at(m.host).use;  // as the host's ranks run
    // Bytes a parameter, the same for every rank of a role and choice: the exchange's own figures.
    const exchanges::Memory held = exchangeFor(mine).memory(mine, layout);
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
      const double extra = (held.server * range + beyond) / kMib + held.serverMib;
      p.peakMib = std::max(m.peakMib, m.residentMib + extra);
      p.perParameterBytes = (4 * static_cast<double>(m.held) + held.server * range + beyond) / std::max(n, 1.0);
      p.parts = fmt::format("{} as loaded + {} of optimizer state and sums", gib(m.residentMib), gib(extra));
    } else {
      const double inFlight = mine.leanMemory() ? std::min(kInFlightMib, 4 * n / kMib) : 0;  // never more than a gradient
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
  MemoryChoices fast;
  for (const RankMeasure& m : ranks) fast[m.host] = {config::MemoryUse::Fast, ""};
  const std::vector<RankMemory> predicted = predictMemory(cfg, parameters, loaded, fast);
  std::map<std::string, double> peakMib, memoryMib;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    peakMib[ranks[r].host] += predicted[r].peakMib;
    memoryMib[ranks[r].host] = ranks[r].hostMib;
  }
  for (const auto& [host, peak] : peakMib) {
    const double memory = memoryMib[host];
    MemoryChoice& c = choices[host];
    if (memory <= 0) {
      c = {config::MemoryUse::Fast, "--memory auto: its memory is unknown"};
    } else {
      c.use = peak <= memory / 2 ? config::MemoryUse::Fast : config::MemoryUse::Lean;
      c.why = fmt::format("--memory auto: {} under fast before activations, {} half of its {}", gib(peak),
                          c.use == config::MemoryUse::Fast ? "within" : "over", gib(memory));
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
  // Each host's peak under either choice, beside the one taken.
  std::map<std::string, double> underFast, underLean;
  for (const auto& [use, peaks] : {std::pair{config::MemoryUse::Fast, &underFast}, {config::MemoryUse::Lean, &underLean}}) {
    MemoryChoices all;
    for (const auto& [host, c] : choices) all[host] = {use, ""};
    const std::vector<RankMemory> p = predictMemory(cfg, parameters, ranks, all);
    for (std::size_t r = 0; r < ranks.size(); ++r) (*peaks)[ranks[r].host] += p[r].peakMib;
  }
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
