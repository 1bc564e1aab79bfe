#include "runtime/probe/NetworkAdvice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "runtime/metrics/Json.h"
#include "runtime/probe/Predictions.h"

namespace pstrain::probe {
namespace {

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

}  // namespace

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

}  // namespace pstrain::probe
