#include "runtime/training/Exchanges.h"

#include <fmt/format.h>

#include "runtime/Errors.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/collective/Collective.h"
#include "runtime/exchanges/peers/Peers.h"
#include "runtime/exchanges/point_to_point/PointToPoint.h"
#include "runtime/exchanges/rounds/Rounds.h"
#include "runtime/exchanges/sharded/Sharded.h"
#include "runtime/roles/RoleArgs.h"

namespace pstrain::training {

const exchanges::Exchange& exchangeOf(config::Exchange exchange) {
  static const exchanges::Exchange* const kExchanges[] = {
      &exchanges::kCollective, &exchanges::kPointToPoint, &exchanges::kAllReduce, &exchanges::kGossip,
      &exchanges::kLocalRounds,
  };
  for (const auto* row : kExchanges) {
    if (row->id == exchange) return *row;
  }
  throw InternalError(fmt::format("exchange {} has no row in training/Exchanges.cpp", config::nameOf(exchange)));
}

const exchanges::Exchange& exchangeFor(config::Mode mode, int servers) {
  const config::Exchange exchange = config::info(mode).exchange;
  return servers > 1 && exchange == config::Exchange::Collective ? exchanges::kSharded : exchangeOf(exchange);
}

const exchanges::Exchange& exchangeFor(const config::TrainConfig& cfg) { return exchangeFor(cfg.mode, cfg.servers); }

void runRole(const roles::RoleArgs& args) {
  const exchanges::Exchange& exchange = exchangeFor(args.cfg);
  (args.comm.rank() == 0 ? exchange.rank0 : exchange.others)(args);
}

}  // namespace pstrain::training
