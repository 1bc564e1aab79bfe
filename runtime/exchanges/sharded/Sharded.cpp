#include "runtime/exchanges/sharded/Sharded.h"

#include <fmt/format.h>

#include <string>

#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/sharded/Shards.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::exchanges {

std::vector<KeyRange> sharded::rangesOf(const models::Net& model, const config::TrainConfig& cfg) {
  return keyRanges(protocol::parameterShapes(model), cfg.servers, cfg.compressesGradients());
}

namespace {

void others(const roles::RoleArgs& args) {
  (args.comm.rank() < args.cfg.servers ? sharded::serve : sharded::work)(args);
}

// The dry run: which server owns which parameters, and what each link carries.
PlanText plan(const PlanFacts& f) {
  const auto ranges = sharded::rangesOf(f.model, f.cfg);
  std::string lines;
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const KeyRange& r = ranges[k];
    lines += fmt::format("  {:<9} rank {} owns parameters [{}, {}): {:.2f} MiB, {} tensor(s){}\n", k ? "" : "servers", k,
                         r.begin, r.end, r.size() * 4.0 / (1 << 20), r.shapes.size(),
                         k ? "" : "; it also writes the run's files");
  }
  return {fmt::format("; {} servers, each sending its range of the weights to every worker and summing that range of "
                      "their gradients", f.cfg.servers),
          lines};
}

}  // namespace

const Exchange kSharded = {config::Exchange::Collective, sharded::serve, others, nullptr, plan};

}  // namespace pstrain::exchanges
