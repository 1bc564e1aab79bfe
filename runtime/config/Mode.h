#pragma once
// The training modes (--mode), one row each in one table (Mode.cpp): what every layer needs
// to know of a mode is a column here, so that the code asks the table, never a mode's name.
// Torch-free: the config, the roles, the probe's cost model, pstrain-run and the benches
// (pstrain --list-modes) read it.
//
// A mode is a combination of an exchange (how the gradients meet the weights: its folder in
// exchanges/, one row of training/Exchanges.cpp's list, which also holds the formula that
// predicts it for the probe) and its parameters (quorum, stale gradients, virtual shards). A
// new mode built from an existing exchange is one row; a new exchange is a folder and a row.
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::config {

enum class Mode { Sync, Backup, Async, Allreduce, Gossip, Diloco, LocalSgd };

enum class Exchange {
  Collective,    // a server and workers: a broadcast of the weights, a sum-reduce of the gradients
  PointToPoint,  // a server and workers: each worker pushes its gradient, the server answers with weights
  AllReduce,     // peers: every rank sums every rank's gradient and applies the same update
  Gossip,        // peers: every rank trains alone and averages with a random peer now and then
  LocalRounds,   // a server and workers: each worker runs --local-steps steps of its own optimizer, then
                 // its pseudo-gradient (global - local weights) is summed like a gradient and rank 0
                 // applies the outer optimizer to it (diloco)
};

// The worker batches behind one update.
enum class Quorum {
  AllShards,  // every virtual shard of the step (sync, allreduce)
  Aggregate,  // the first --aggregate K gradients computed on the step's weights (0: workers - 1)
  One,        // one batch (async; gossip: each rank's own)
};

// Point to point: a gradient computed on older weights than the server's.
enum class StalePolicy {
  None,        // cannot happen (collective and peer exchanges)
  Drop,        // any: dropped and counted; its worker gets the newest weights (backup)
  RetryAfter,  // more than --max-staleness updates old: its worker computes that batch again (async)
};

struct ModeInfo {
  Mode mode;
  const char* name;
  Exchange exchange;
  Quorum quorum;
  StalePolicy stale;
  bool dealsVirtualShards;  // a step's global batch is dealt to --virtual-shards, whoever computes them
  bool updatePerBatch;  // every worker batch is an update: an epoch has workers x batches updates
  const char* plan;     // the dry run's "exchange" line
  const char* help;     // one line of --list-modes
  bool averages = false;  // local rounds: the outer step is the workers' plain average (no --outer-* flags)

  // No server: every rank computes and rank 0 also writes the run's files.
  bool peers() const { return exchange == Exchange::AllReduce || exchange == Exchange::Gossip; }
  // The workers run rounds of local steps with --optimizer between exchanges (diloco,
  // localsgd); rank 0 steps the global weights with the outer rule (TrainConfig::updateRule:
  // diloco's --outer-optimizer, localsgd's plain average).
  bool runsLocalRounds() const { return exchange == Exchange::LocalRounds; }
};

// Every mode, in --list-modes order.
const std::vector<ModeInfo>& modes();
const ModeInfo& info(Mode mode);
const char* nameOf(Mode mode);
// "collective", "point-to-point", "all-reduce", "gossip"; "all-shards", "aggregate", "one"
// (pstrain --list-modes).
const char* nameOf(Exchange exchange);
const char* nameOf(Quorum quorum);
// The mode called `name`; throws ConfigError listing the names for any other.
Mode parseMode(const std::string& name);

// "sync, backup, async, allreduce, gossip, diloco".
std::string modeNames();

}  // namespace pstrain::config
