#pragma once
// A server's range of the weights and of the optimizer state as messages between servers
// (--servers K): at start-up (LeadMessages.h) and for a checkpoint (CheckpointGather.h).
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/Registry.h"
#include "runtime/comm/Communicator.h"
#include "runtime/exchanges/Ranges.h"
#include "runtime/optim/Optimizer.h"

namespace pstrain::exchanges {

// Servers 1..K-1 hold their range only: the model's weights, built on every rank, go (the
// frozen ones too: server 0's checkpoints hold them).
void releaseWeights(models::Net& model);

// The line that heads a range's optimizer state: "UPDATES NAME..." (the optimizer's counted
// updates and its states' names).
void sendStateHeader(comm::Communicator& comm, const optim::Optimizer& optimizer, int to, const std::string& context);

// A range's weights (unless null) and optimizer state, from one server to another: its
// header line (sendStateHeader), then the weights and each state's range.
void sendState(comm::Communicator& comm, const float* weights, std::int64_t floats, const optim::Optimizer& optimizer,
               const std::vector<at::Tensor>& states, int to, const std::string& context);

struct StateHeader {
  std::int64_t updates = 0;
  std::vector<std::string> names;
};
StateHeader receiveStateHeader(comm::Communicator& comm, int from, const std::string& context);

// Receives `bytes` bytes from `from` into `data`.
void receiveInto(comm::Communicator& comm, void* data, std::size_t bytes, int from, const char* what,
                 const std::string& context);

// The optimizer's states, each narrowed to `range` (contiguous views); a range's own
// optimizer holds its range's only (`range` null: whole).
std::vector<at::Tensor> statesOf(const optim::Optimizer& optimizer, const KeyRange* range);

}  // namespace pstrain::exchanges
