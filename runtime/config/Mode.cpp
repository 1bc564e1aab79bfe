#include "runtime/config/Mode.h"

#include <fmt/format.h>

#include "runtime/Errors.h"
#include "runtime/config/Table.h"

namespace pstrain::config {

const std::vector<ModeInfo>& modes() {
  static const std::vector<ModeInfo> table = {
      {Mode::Sync, "sync", Exchange::Collective, Quorum::AllShards, StalePolicy::None, true, false,
       "one broadcast of the weights, one sum-reduce of the gradients",
       "server + N workers: one broadcast of the weights, one sum-reduce of the gradients per step"},
      {Mode::Backup, "backup", Exchange::PointToPoint, Quorum::Aggregate, StalePolicy::Drop, false, false,
       "point to point, each worker at its own pace",
       "server + N workers: a step is applied once --aggregate K gradients of it are in; later ones are dropped"},
      {Mode::Async, "async", Exchange::PointToPoint, Quorum::One, StalePolicy::RetryAfter, false, true,
       "point to point, each worker at its own pace",
       "server + N workers: each gradient applied on arrival unless more than --max-staleness updates old"},
      {Mode::Allreduce, "allreduce", Exchange::AllReduce, Quorum::AllShards, StalePolicy::None, true, false,
       "MPI_Allreduce of the gradients",
       "N peers: every rank computes; MPI_Allreduce of the gradients; every rank applies the same update"},
      {Mode::Gossip, "gossip", Exchange::Gossip, Quorum::One, StalePolicy::None, false, false,
       "one-sided reads of a peer's weights",
       "N peers: every rank trains alone and now and then averages with a random peer's weights"},
      {Mode::Diloco, "diloco", Exchange::LocalRounds, Quorum::One, StalePolicy::None, false, false,
       "rounds of --local-steps: the weights down and each worker's pseudo-gradient up once a round",
       "server + N workers: each worker runs --local-steps steps alone, rank 0 applies the outer optimizer "
       "(Nesterov) to the mean of their global - local weights (DiLoCo)"},
      {Mode::LocalSgd, "localsgd", Exchange::LocalRounds, Quorum::One, StalePolicy::None, false, false,
       "rounds of --local-steps: the weights down and each worker's weights up once a round",
       "server + N workers: each worker runs --local-steps steps alone, then the global weights are the mean of "
       "theirs (periodic model averaging, local SGD)", true},
  };
  return table;
}

const ModeInfo& info(Mode mode) {
  for (const auto& row : modes()) {
    if (row.mode == mode) return row;
  }
  throw InternalError(fmt::format("mode {} has no row in the mode table", static_cast<int>(mode)));
}

const char* nameOf(Mode mode) { return info(mode).name; }

const char* nameOf(Exchange exchange) {
  switch (exchange) {
    case Exchange::Collective: return "collective";
    case Exchange::PointToPoint: return "point-to-point";
    case Exchange::AllReduce: return "all-reduce";
    case Exchange::Gossip: return "gossip";
    case Exchange::LocalRounds: return "local-rounds";
  }
  return "?";
}

const char* nameOf(Quorum quorum) {
  switch (quorum) {
    case Quorum::AllShards: return "all-shards";
    case Quorum::Aggregate: return "aggregate";
    case Quorum::One: return "one";
  }
  return "?";
}

std::string modeNames() { return namesOf(modes(), ", "); }

Mode parseMode(const std::string& name) { return rowNamed(modes(), name, "mode", ", ").mode; }

}  // namespace pstrain::config
