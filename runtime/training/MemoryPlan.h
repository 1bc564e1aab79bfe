#pragma once
// What each rank and each host of a job will hold at its peak (--dry-run, --doctor), and the
// largest model that the layout could train in the memory its hosts have. From what each
// rank measured of itself (its process, data and model as loaded; a worker, one real step:
// the activations and the gradient as its exchange keeps it) and, for what the dry run does
// not allocate, from the run's settings: the model's parameters, the mode, the optimizer, the
// precision, K and the codecs. Torch-free.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/config/TrainConfig.h"

namespace pstrain::training {

// What a rank measured of itself (MiB), and the parameters it holds.
struct RankMeasure {
  std::string host;
  double hostMib = 0;        // the host's physical memory
  double residentMib = 0;    // now: its process, data and model as loaded
  double peakMib = 0;        // so far: the start-up's peak (loading the model)
  double stepMib = -1;       // a computing rank: what one step adds above residentMib; < 0: not measured
  std::int64_t held = 0;     // parameters whose weights it holds (a server of K > 1: its range)
};

// A rank's predicted peak: its measured part plus what grows with the model.
struct RankMemory {
  std::string role;                // "server", "worker" or "peer"
  double peakMib = 0;
  std::string parts;               // what the peak is made of: "1.02 GiB as loaded + 0.65 GiB a step"
  double perParameterBytes = 0;    // the bytes of peakMib that each of the model's parameters costs
};

// --memory for one host: fast or lean, and why.
struct MemoryChoice {
  config::MemoryUse use = config::MemoryUse::Lean;  // Fast or Lean
  std::string why;  // "--memory auto: 2.10 GiB under fast before activations, within half of its 23.59 GiB"
  double leanSpareMib = 0;  // auto's lean: each of the host's ranks' RunPlan::leanSpareMib
};
using MemoryChoices = std::map<std::string, MemoryChoice>;  // by host name

// Each host's --memory: as given, or auto's choice: fast where the host's predicted peak
// under fast, from what a start-up knows (each rank as loaded and what grows with the
// model, no step: a normal start-up runs none, so the dry run decides on the same facts),
// is at most half its memory (the rest for the activations, the system and the other
// programs), or where its memory is unknown; else lean, whose ranks share what is left of
// that half under lean (leanSpareMib) for more transfers in flight: lean's speed grows with the
// room a host has, up to fast's. A pure function of `ranks`: every rank that has the
// handshake's facts decides the same.
MemoryChoices chooseMemory(const config::TrainConfig& cfg, std::int64_t parameters,
                           const std::vector<RankMeasure>& ranks);

// Every rank's predicted peak (by rank), under its host's choice. `parameters`: the model's
// count. Without `choices`: chooseMemory's.
std::vector<RankMemory> predictMemory(const config::TrainConfig& cfg, std::int64_t parameters,
                                      const std::vector<RankMeasure>& ranks);
std::vector<RankMemory> predictMemory(const config::TrainConfig& cfg, std::int64_t parameters,
                                      const std::vector<RankMeasure>& ranks, const MemoryChoices& choices);

// The dry run's lines: each rank, each host (against its memory, with its peak under fast
// and under lean and the choice between them), and the largest model the layout could train
// (each host's fixed part as measured, the rest per parameter). Hosts that would not fit
// are named.
std::string describeMemory(const config::TrainConfig& cfg, std::int64_t parameters,
                           const std::vector<RankMeasure>& ranks, const MemoryChoices& choices);

// One line per host whose predicted peak exceeds its memory, naming it: "host mbp-2: 9.8 GiB
// predicted (its ranks 1, 3), it has 8.0 GiB".
std::vector<std::string> hostsThatDoNotFit(const std::vector<RankMeasure>& ranks,
                                           const std::vector<RankMemory>& predicted);

}  // namespace pstrain::training
