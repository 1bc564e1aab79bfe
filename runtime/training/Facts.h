#pragma once
// What the ranks told each other at the handshake (protocol/Handshake.h: each rank's facts,
// the "info." ones recorded only), as the start-up's checks, its dry run and run.json read
// them. Torch-free.
#include <map>
#include <string>
#include <vector>

#include "runtime/config/TrainConfig.h"

namespace pstrain::training {

// By rank: each rank's facts, by name.
using RankFacts = std::vector<std::map<std::string, std::string>>;

// The ranks' BLASes: the one name when they share it, else "NAME on rank(s) R, R; ...".
std::string blasOfRanks(const RankFacts& facts);
// A token file's id type ("uint16", "uint32"), as the first computing rank read it; "" for
// data that is not a token file.
const std::string& tokenIdsOf(const config::TrainConfig& cfg, const RankFacts& facts);
// A rank's host as the layout checks tell hosts apart: "name (its addresses)".
std::string hostOf(const std::map<std::string, std::string>& facts);

}  // namespace pstrain::training
