#pragma once
// The sharded exchange's parts (Sharded.h), private to its folder.
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/exchanges/Ranges.h"
#include "runtime/exchanges/Servers.h"
#include "runtime/roles/RoleArgs.h"

namespace pstrain::exchanges::sharded {

// The roles: a server (ranks 0..K-1; server 0 also does what sync's rank 0 does) and a worker.
void serve(const roles::RoleArgs& args);
void work(const roles::RoleArgs& args);

// The run's key ranges of `model`'s parameters (Ranges.h): whole tensors with a gradient or a
// weight codec (its frames and scales are per tensor, and so stay one server's).
std::vector<KeyRange> rangesOf(const models::Net& model, const config::TrainConfig& cfg);

inline std::size_t bytesOf(const KeyRange& range) { return static_cast<std::size_t>(range.size()) * sizeof(float); }

}  // namespace pstrain::exchanges::sharded
