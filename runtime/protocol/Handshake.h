#pragma once
// The start-up handshake: every rank states its facts (config fields, parameter shapes,
// dataset size, host, device) and every rank checks that the facts that must agree do.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/Communicator.h"

namespace pstrain::protocol {

using Facts = std::vector<std::pair<std::string, std::string>>;

// Gathers every rank's facts, indexed by rank. A fact whose key starts with "info." is only
// recorded; any other fact must have the same value on every rank that states it, an empty
// value included (a rank without --init-from states an empty file identity, and is
// compared); a rank leaves out a fact that is not its (a server has no data set). Throws
// CollectiveConfigError, the same on every rank, naming the first field that differs, its
// values and the ranks (and, for a field "X", each rank's "info.X": what the value is of,
// such as a file's path).
std::vector<std::map<std::string, std::string>> handshake(comm::Communicator& comm,
                                                          const Facts& mine);

// The wire form of a rank's facts: "key=value" lines, backslash and newline escaped ("\\",
// "\n") in both. decodeFacts accepts any bytes (they come from the network): a line
// without '=' or a bad escape is a CommError.
std::string encodeFacts(const Facts& facts);
std::map<std::string, std::string> decodeFacts(const std::string& encoded, int rank);

}  // namespace pstrain::protocol
