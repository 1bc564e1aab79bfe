#include "runtime/exchanges/StateMessages.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <sstream>

#include "runtime/Errors.h"
#include "runtime/comm/Values.h"

namespace pstrain::exchanges {

// Servers 1..K-1 hold their range only: the model's weights, built on every rank, go (the
// frozen ones too: server 0's checkpoints hold them).
void releaseWeights(models::Net& model) {
  torch::NoGradGuard noGrad;
  for (at::Tensor& p : model.parameters()) p.set_data(torch::empty({0}));
  for (auto& [name, w] : model.frozen()) w.set_data(torch::empty({0}));
}

// The line that heads a range's optimizer state: "UPDATES NAME..." (the optimizer's counted
// updates and its states' names).
void sendStateHeader(comm::Communicator& comm, const optim::Optimizer& optimizer, int to, const std::string& context) {
  std::string line = std::to_string(optimizer.updates());
  for (const auto& [name, buffer] : optimizer.state()) line += " " + name;
  comm.send(line.data(), line.size(), to, context);
}

// A range's weights (unless null) and optimizer state, from one server to another: its
// header line (sendStateHeader), then the weights and each state's range.
void sendState(comm::Communicator& comm, const float* weights, std::int64_t floats, const optim::Optimizer& optimizer,
               const std::vector<at::Tensor>& states, int to, const std::string& context) {
  sendStateHeader(comm, optimizer, to, context);
  if (weights) comm.send(weights, static_cast<std::size_t>(floats) * sizeof(float), to, context);
  for (const at::Tensor& state : states) comm.send(state.data_ptr<float>(), state.numel() * sizeof(float), to, context);
}

StateHeader receiveStateHeader(comm::Communicator& comm, int from, const std::string& context) {
  std::string line(4096, '\0');
  line.resize(comm.receive(line.data(), line.size(), from, context).bytes);
  std::istringstream in(line);
  StateHeader header;
  in >> header.updates;
  for (std::string name; in >> name;) header.names.push_back(name);
  return header;
}

// Receives `bytes` bytes from `from` into `data`.
void receiveInto(comm::Communicator& comm, void* data, std::size_t bytes, int from, const char* what,
                 const std::string& context) {
  comm::expectBytes(comm.receive(data, bytes, from, context).bytes, bytes, from, what, context);
}

// The optimizer's states, each narrowed to `range` (contiguous views); a range's own
// optimizer holds its range's only (`range` null: whole).
std::vector<at::Tensor> statesOf(const optim::Optimizer& optimizer, const KeyRange* range) {
  std::vector<at::Tensor> states;
  for (const auto& [name, buffer] : optimizer.state()) {
    states.push_back(range ? buffer.narrow(0, range->begin, range->size()) : buffer);
  }
  return states;
}

}  // namespace pstrain::exchanges
