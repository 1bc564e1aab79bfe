#pragma once
// An exchange: how the gradients meet the weights (config/Mode.h's Exchange; a mode is an
// exchange and its parameters). Each one is a folder of runtime/exchanges/ holding what
// only it knows (its loops, its cost formula, its lines of the dry run, its metrics and
// what it checkpoints) behind one row of this type; training/Exchanges.cpp lists the rows.
// The services an exchange calls (roles/: the server loop, UpdateState, Admission, RangeUpdate,
// Publisher, the worker loop; protocol/StepLink) never ask which exchange called them.
// Torch-free.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/config/Mode.h"
#include "runtime/exchanges/Cost.h"
#include "runtime/exchanges/Memory.h"
#include "runtime/exchanges/Ranges.h"

namespace pstrain::config {
struct RunPlan;
struct TrainConfig;
}
namespace pstrain::models {
class Net;
}
namespace pstrain::roles {
struct RoleArgs;
}

namespace pstrain::exchanges {

// What the dry run knows when it asks an exchange for its part of the plan.
struct PlanFacts {
  const config::TrainConfig& cfg;
  const models::Net& model;
  std::int64_t total;    // the run's updates
  std::size_t down, up;  // the raw bytes of one message each way
};

// An exchange's part of the dry run: `modeWords`, if any, in place of the mode's words on the
// "exchange" line (an exchange that is not its mode's usual one); `sameLine` continues that
// line (after the codecs); `lines` follow it, each "  name      text\n". Its checkpoints fall
// at the end of a round of `checkpointRound` steps (the first that passes each multiple of
// --checkpoint-every).
struct PlanText {
  std::string sameLine, lines;
  std::int64_t checkpointRound = 1;
  std::string modeWords;
};

struct Exchange {
  config::Exchange id;
  // Whether it runs a run of its mode's exchange `id` with `servers` (--servers); null: every
  // such run. The list (training/Exchanges.cpp) takes the first row that says so.
  bool (*takes)(int servers);
  // Rank 0's part and every other rank's, collective with each other; they throw on any error.
  void (*rank0)(const roles::RoleArgs&);
  void (*others)(const roles::RoleArgs&);
  // pstrain --probe: one update's seconds and samples (Cost.h); null where the cost model
  // predicts nothing (gossip: its ranks average when they please).
  StepEstimate (*cost)(const StepCost&);
  // The dry run's text of its own; null where it has none.
  PlanText (*plan)(const PlanFacts&);
  // What its ranks hold beyond what the dry run allocates (the memory plan's figures).
  Memory (*memory)(const config::RunPlan&, const config::Layout&);
  // Its refusals of a run that only it knows (throws CollectiveConfigError), run on every
  // rank after the handshake, before anything trains or is planned; null: none.
  void (*check)(const config::TrainConfig&, const models::Net&) = nullptr;
  // The flat weights that server `rank` uses of its initial model, from the model's shapes
  // (what is loaded of a model file); null: all of them.
  KeyRange (*serverWeights)(const config::TrainConfig&, const models::Net&, int rank) = nullptr;
  // Whether `cost` models StepCost::servers (the probe then predicts the row with K servers
  // too); false where it predicts one server only (diloco's rounds: their exchange is timed
  // with one server).
  bool costsServers = false;
};

}  // namespace pstrain::exchanges
