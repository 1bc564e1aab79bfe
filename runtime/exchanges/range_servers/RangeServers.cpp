#include "runtime/exchanges/range_servers/RangeServers.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "runtime/Parts.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/RangesWorker.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/ServerRanges.h"
#include "runtime/exchanges/range_servers/RangeServer.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::exchanges::range_servers {
namespace {

void others(const roles::RoleArgs& args) {
  if (args.comm.rank() < args.cfg.servers) return serve(args);
  runRangesWorker(args, Pace::Lockstep);
}

// The dry run: which server owns which parameters (and, where whole tensors leave them
// uneven, why).
PlanText plan(const PlanFacts& f) {
  const auto ranges = serverRanges(f.model, f.cfg);
  std::string lines = describeRanges(ranges);
  std::int64_t largest = 0;
  for (const KeyRange& r : ranges) largest = std::max(largest, r.size());
  const double even = static_cast<double>(ranges.back().end) / f.cfg.servers;
  if (rangesKeepTensorsWhole(f.cfg) && largest > 1.5 * even) {
    const bool gradients = f.cfg.compressesGradients();
    lines += fmt::format("  {:<9} uneven: the {} codec keeps tensors whole, and the largest range is {:.1f}x an even "
                         "share (--compress{} none cuts inside tensors)\n", "", gradients ? "gradient" : "weight",
                         largest / even, gradients ? "" : "-weights");
  }
  PlanText text;
  text.modeWords = fmt::format("over {} servers, each serving a range: each sends its range of the weights to every worker and sums "
                               "that range of their gradients{}", f.cfg.servers,
                               f.cfg.updatesOnArrival() ? ", updating each 4 MiB part as it arrives (--overlap)"
                                                             : "");
  text.lines = lines;
  return text;
}

// BytePS's cost: each direction takes the longer of a worker's whole message over its link
// and the n range messages through a server's link (servers on links like the measured
// server's); after the slowest batch, the workers encode, each server decodes its n ranges and
// updates its 1/K of the model.
StepEstimate cost(const StepCost& c) {
  const Links l = linksOf(c.m, c.n);
  const double k = c.servers;
  auto way = [&](double bytes) {
    return std::max(message(bytes, l.worstLatency, l.slowestBandwidth), c.n * message(bytes / k, l.worstLatency, l.serverBandwidth));
  };
  const double up = c.grad.encodeSeconds + way(c.grad.bytes) + c.n * c.grad.decodeSeconds / k;
  return {kthFastest(c.m, c.n, c.n) + up + c.m.updateSeconds / k + way(c.weights.bytes), c.n * c.m.batchSamples};
}

// A server: its range's optimizer state, and the range's sum unless it updates each part on
// arrival, beside the slots of its workers' raw parts (ServedRange::receiveGradients: every
// worker's but the first's, which land in the sum, unless it updates each part; coded: two
// frames; bfloat16 weights go through a few staged parts). A worker: the parts in flight
// (lean), or its whole gradient where it does not stream or keeps it (fast).
Memory memory(const config::RunPlan& cfg, const config::Layout& layout) {
  Memory m;
  m.held = weightBytes(cfg);
  addGradientBuffer(m, cfg, cfg.streamsGradients());
  m.worker = residualBytes(cfg);
  m.server = stateBytes(cfg) + (cfg.updatesOnArrival() ? 0 : 4) + decodingBytes(cfg);
  if (!cfg.compressesGradients()) m.slottedWorkers = cfg.updatesOnArrival() ? layout.workers() : layout.workers() - 1;
  return m;
}

// A model whose parameters cannot give every server a range is refused (Ranges.h).
void check(const config::TrainConfig& cfg, const models::Net& model) { serverRanges(model, cfg); }

// Sync's runs with more than one server (one server: the collective exchange).
bool takes(int servers) { return servers > 1; }

// Server k updates its range and takes it from its own model (receiveStart); server 0's
// checkpoints gather the others' ranges.
KeyRange serverWeights(const config::TrainConfig& cfg, const models::Net& model, int rank) {
  return serverRanges(model, cfg)[static_cast<std::size_t>(rank)];
}

}  // namespace
}  // namespace pstrain::exchanges::range_servers

namespace pstrain::exchanges {

const Exchange kRangeServers = {config::Exchange::Collective, range_servers::takes, range_servers::serve, range_servers::others, range_servers::cost,
                           range_servers::plan, range_servers::memory, range_servers::check, range_servers::serverWeights, true};

}  // namespace pstrain::exchanges
