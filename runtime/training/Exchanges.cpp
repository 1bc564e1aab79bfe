#include "runtime/training/Exchanges.h"

#include <fmt/format.h>

#include "runtime/Errors.h"
#include "runtime/roles/ParameterServer.h"
#include "runtime/roles/PeerTraining.h"
#include "runtime/roles/Worker.h"
#include "runtime/roles/rounds/Rounds.h"

namespace pstrain::roles {
namespace {

struct ExchangeRoles {
  config::Exchange exchange;
  void (*rank0)(const RoleArgs&);
  void (*others)(const RoleArgs&);
};

const ExchangeRoles kRoles[] = {
    {config::Exchange::Collective, serveCollective, runCollectiveWorker},
    {config::Exchange::PointToPoint, servePointToPoint, runPointToPointWorker},
    {config::Exchange::AllReduce, runAllreducePeer, runAllreducePeer},
    {config::Exchange::Gossip, runGossipPeer, runGossipPeer},
    {config::Exchange::LocalRounds, serveRounds, runRoundsWorker},
};

}  // namespace

void runRole(const RoleArgs& args) {
  const config::Exchange exchange = args.cfg.modeInfo().exchange;
  for (const auto& row : kRoles) {
    if (row.exchange == exchange) return (args.comm.rank() == 0 ? row.rank0 : row.others)(args);
  }
  throw InternalError(fmt::format("exchange {} has no roles", config::nameOf(exchange)));
}

}  // namespace pstrain::roles
