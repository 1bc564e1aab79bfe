#include "runtime/exchanges/LeadMessages.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/roles/ServerLoop.h"
#include "runtime/roles/StepStats.h"
#include "runtime/exchanges/ServerRanges.h"
#include "runtime/exchanges/StateMessages.h"

namespace pstrain::exchanges {

bool startSendsWeights(const roles::Server& s) { return s.resumed || s.model.fileIdentity().empty(); }

void sendStarts(comm::Communicator& comm, const std::vector<KeyRange>& ranges, const Start& start,
                const at::Tensor& weights, const optim::Optimizer& whole, optim::Optimizer& own) {
  for (std::size_t k = 1; k < ranges.size(); ++k) {
    const int server = static_cast<int>(k);
    sendValue(comm, start, server, "start-up");
    const float* range = start.weightsFollow ? weights.data_ptr<float>() + ranges[k].begin : nullptr;
    sendState(comm, range, ranges[k].size(), whole, statesOf(whole, &ranges[k]), server, "start-up");
  }
  for (const auto& [name, buffer] : whole.state()) {
    own.restore(name, buffer.narrow(0, ranges[0].begin, ranges[0].size()).clone());
  }
  own.restoreUpdates(whole.updates());
}

Start receiveStart(comm::Communicator& comm, RangeUpdate& update, models::Net& model) {
  const std::string context = "start-up";
  const auto start = receiveValue<Start>(comm, 0, context);
  const StateHeader header = receiveStateHeader(comm, 0, context);
  const std::size_t bytes = static_cast<std::size_t>(update.range().size()) * sizeof(float);
  if (start.weightsFollow) {
    receiveInto(comm, update.weights().data_ptr<float>(), bytes, 0, "range of the weights", context);
  } else {
    protocol::copyWeights(model, update.range().begin, update.weights());
  }
  releaseWeights(model);
  for (const std::string& name : header.names) {
    at::Tensor state = torch::empty({update.range().size()});
    receiveInto(comm, state.data_ptr<float>(), bytes, 0, "range of the optimizer state", context);
    update.optimizer().restore(name, state);
  }
  update.optimizer().restoreUpdates(header.updates);
  return start;
}

Partial partialOf(const RangeUpdate& update, double updateSeconds, double bytesOut, double bytesIn) {
  return {update.sumOfSquares(), update.finite() ? 1.0 : 0.0, updateSeconds, bytesOut, bytesIn, portable::peakRssMib()};
}

Error weightsNotFinite(std::int64_t step, int rank) {
  return Error(fmt::format("step {}: server {}'s weights are not finite after the update; lower --lr", step, rank));
}

void applyVerdict(RangeUpdate& update, const Verdict& v, std::int64_t step, int rank) {
  if (v.apply && !update.step(v.lr, v.divisor)) throw weightsNotFinite(step, rank);
}

Verdict decide(comm::Communicator& comm, roles::Admission& admission, const float* trailer,
               std::vector<Partial>& partials, std::int64_t step, Verdict v, double& gradNorm) {
  const std::string context = fmt::format("step {}", step);
  for (std::size_t k = 1; k < partials.size(); ++k) partials[k] = receiveValue<Partial>(comm, static_cast<int>(k), context);
  bool finiteGradient = true;
  double sumOfSquares = 0;
  for (const Partial& p : partials) {
    finiteGradient = finiteGradient && p.finite != 0;
    sumOfSquares += p.sumOfSquares;
  }
  v.step = static_cast<double>(step);
  if (v.apply) {
    v.divisor = admission.divisor(trailer, step, [&] { return finiteGradient; }, [&] { return sumOfSquares; });
    v.apply = v.divisor != 0;
    if (v.apply && !finiteGradient) throw admission.nonFinite(step);
    if (v.apply) gradNorm = admission.gradNorm();
  }
  for (std::size_t k = 1; k < partials.size(); ++k) sendValue(comm, v, static_cast<int>(k), context);
  return v;
}

Verdict receiveVerdict(comm::Communicator& comm, const Partial& partial, const std::string& context) {
  sendValue(comm, partial, 0, context);
  return receiveValue<Verdict>(comm, 0, context);
}

std::string describeRanges(const std::vector<KeyRange>& ranges) {
  std::string lines;
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const KeyRange& r = ranges[k];
    lines += fmt::format("  {:<9} rank {} owns parameters [{}, {}): {:.2f} MiB, {} tensor(s){}\n", k ? "" : "servers", k,
                         r.begin, r.end, r.size() * 4.0 / (1 << 20), r.shapes.size(),
                         k ? "" : "; it also writes the run's files");
  }
  return lines;
}

void countTraffic(roles::StepStats& stats, const protocol::StepMessages& messages, const std::vector<Partial>& partials) {
  stats.bytesDown = static_cast<double>(sizeof(protocol::StepHeader)) + messages.downTail.numel() * sizeof(float);
  stats.bytesUp = static_cast<double>(messages.tailFloats() * sizeof(float));
  for (const Partial& p : partials) {
    stats.bytesDown += p.bytesOut;
    stats.bytesUp += p.bytesIn;
  }
  stats.rawBytesDown = static_cast<double>(messages.downBytes());
  stats.rawBytesUp = static_cast<double>(messages.upBytes());
}

void addServers(metrics::JsonObject& line, const std::vector<Partial>& partials, int workers) {
  for (std::size_t k = 0; k < partials.size(); ++k) {
    const Partial& p = partials[k];
    line.add(fmt::format("server{}_mib_per_step", k), (p.bytesOut + p.bytesIn) * workers / (1 << 20));
    line.add(fmt::format("server{}_update_s", k), p.updateSeconds);
    line.add(fmt::format("server{}_peak_rss_mib", k), p.peakRssMib);
  }
}

}  // namespace pstrain::exchanges
