#pragma once
// The outer step over K servers (--servers with diloco or localsgd), private to this folder:
// server k holds range k of the global weights (and of the copy the workers hold, under a
// lossy down codec) and of the outer optimizer's state, takes its range of the summed
// pseudo-gradient from the chain (RoundChain.h) and sends its range down; server 0 runs the
// rounds (RoundsServer.cpp) and decides for every server (exchanges/LeadMessages.h).
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/exchanges/CheckpointGather.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/RangeUpdate.h"
#include "runtime/roles/RoleArgs.h"
#include "runtime/roles/ServerLoop.h"

namespace pstrain::exchanges::rounds {

// Server 0's part of the outer step. `weights`: messages.weights, which the outer step steps.
class OuterLead {
 public:
  explicit OuterLead(roles::Server& s);

  // Every server's range of the (resumed) model and outer state; whether the run trains.
  void start(bool training);
  // Where the chain sums range 0 of the pseudo-gradient (range 0's floats).
  float* sum() { return own_.sum(); }
  // The round from `step` (its outer lr `lr`): every server's word, the verdict told to
  // each (`skip`: the round carries no samples; `gather`: a checkpoint's ranges follow the
  // down message; `train`: whether it trains), and range 0's step. Returns whether the outer
  // step was applied.
  bool apply(std::int64_t step, double lr, bool skip, bool gather, bool train, roles::UpdateTime& time);
  // After the down message: every range of `model` (the weights as the workers hold them,
  // whole) and of the outer state, into what the Publisher reads (CheckpointGather: release
  // it after the round's record, or after finish at the end).
  void gather(float* model, const std::string& context) { gather_.gather(model, context); }
  exchanges::CheckpointGather& checkpoints() { return gather_; }
  // Each server's bytes per round, update time and peak memory, for every metrics line.
  void addServers(metrics::JsonObject& line) const { exchanges::addServers(line, partials_, 1); }
  // Range 0's link's bytes of the last round, each way.
  void countTraffic(double sent, double received) { sent_ = sent, received_ = received; }

 private:
  roles::Server& s_;
  const std::vector<exchanges::KeyRange> ranges_;
  exchanges::RangeUpdate own_;
  std::vector<exchanges::Partial> partials_;
  exchanges::CheckpointGather gather_;
  double sent_ = 0, received_ = 0;
};

// Servers 1..K-1: their range, round by round as server 0 says.
void followRounds(const roles::RoleArgs& args);

}  // namespace pstrain::exchanges::rounds
