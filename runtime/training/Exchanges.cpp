#include "runtime/training/Exchanges.h"

#include <fmt/format.h>

#include "runtime/Errors.h"
#include "runtime/config/Layout.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/collective/Collective.h"
#include "runtime/exchanges/peers/Peers.h"
#include "runtime/exchanges/point_to_point/PointToPoint.h"
#include "runtime/exchanges/rounds/Rounds.h"
#include "runtime/exchanges/range_servers/RangeServers.h"
#include "runtime/roles/RoleArgs.h"

namespace pstrain::training {

namespace {

// In the order they are asked: a row that takes some runs of its id before the one that
// takes the rest.
const exchanges::Exchange* const kExchanges[] = {
    &exchanges::kRangeServers, &exchanges::kCollective, &exchanges::kPointToPoint, &exchanges::kAllReduce,
    &exchanges::kGossip,  &exchanges::kLocalRounds,
};

}  // namespace

const exchanges::Exchange& exchangeFor(config::Mode mode, int servers) {
  const config::Exchange exchange = config::info(mode).exchange;
  for (const auto* row : kExchanges) {
    if (row->id == exchange && (!row->takes || row->takes(servers))) return *row;
  }
  throw InternalError(fmt::format("exchange {} with {} servers has no row in training/Exchanges.cpp",
                                  config::nameOf(exchange), servers));
}

const exchanges::Exchange& exchangeFor(const config::TrainConfig& cfg) {
  return exchangeFor(cfg.mode, config::Layout(cfg, 0).servers());
}

void runRole(const roles::RoleArgs& args) {
  const exchanges::Exchange& exchange = exchangeFor(args.cfg);
  (args.comm.rank() == 0 ? exchange.rank0 : exchange.others)(args);
}

}  // namespace pstrain::training
