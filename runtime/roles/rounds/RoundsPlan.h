#pragma once
// What a diloco run's rounds are, from its config, in one place for the server, the
// workers, the dry run and the announcement: the local steps of a round, whether the
// exchange travels during the next round, and the codecs of the two directions.
#include <cstdint>
#include <string>

#include "runtime/config/TrainConfig.h"
#include "runtime/roles/rounds/RoundChain.h"

namespace pstrain::roles {

struct RoundsPlan {
  std::int64_t localSteps = 0;  // H
  bool overlap = false;         // a round's exchange travels during the next round
  RoundChain::Codecs codecs;
};

RoundsPlan roundsPlanOf(const config::TrainConfig& cfg);

// "50 local steps a round, dealt by speed, exchanged during the next; outer nesterov, lr
// 0.7, momentum 0.9; up int4 with error feedback, down int4 updates": the server's
// announcement.
std::string describeRounds(const RoundsPlan& plan, const config::TrainConfig& cfg);

// The dry run's lines of the rounds: how many, what one moves each way, and the outer step.
// `down`, `up`: the raw bytes of one down and one up message.
std::string roundsDryRun(const config::TrainConfig& cfg, std::int64_t total, std::size_t down, std::size_t up);

}  // namespace pstrain::roles
