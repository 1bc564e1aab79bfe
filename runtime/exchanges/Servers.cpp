#include "runtime/exchanges/Servers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <sstream>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/metrics/Clock.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/ServerLoop.h"
#include "runtime/roles/StepStats.h"

namespace pstrain::exchanges {

bool rangesKeepTensorsWhole(const config::TrainConfig& cfg) {
  return cfg.compressesGradients() || cfg.compressesWeights();
}

std::vector<KeyRange> serverRanges(const models::Net& model, const config::TrainConfig& cfg) {
  const codec::Shapes shapes = protocol::parameterShapes(model);
  const bool whole = rangesKeepTensorsWhole(cfg);
  if (whole && static_cast<std::int64_t>(shapes.size()) < cfg.servers) {  // the codecs that keep them whole, by name
    std::vector<std::string> codecs, drop;
    if (cfg.compressesGradients()) codecs.push_back("--compress " + cfg.gradientCodec()), drop.push_back("--compress none");
    if (cfg.compressesWeights()) {
      codecs.push_back("--compress-weights " + cfg.weightCodec());
      drop.push_back("--compress-weights none");
    }
    throw CollectiveConfigError(fmt::format("--servers {}: the model has {} parameter tensors, and {} codes each tensor "
                                            "whole on one server: use at most {} servers, or {}", cfg.servers,
                                            shapes.size(), fmt::join(codecs, " and "), shapes.size(),
                                            fmt::join(drop, " and ")));
  }
  return keyRanges(shapes, cfg.servers, whole);
}

RangeUpdate::RangeUpdate(const config::TrainConfig& cfg, KeyRange range, at::Tensor weights,
                         const codec::Shapes& modelShapes, bool eachPart)
    : rule_(cfg.updateRule()),
      range_(std::move(range)),
      eachPart_(eachPart),
      weights_(std::move(weights)),
      sum_(eachPart ? 0 : static_cast<std::size_t>(range_.size())),
      optimizer_(optim::makeOptimizer(rule_, modelShapes, range_.begin, range_.end)) {}

namespace {

Error notFinite(std::int64_t step, int rank) {
  return Error(fmt::format("step {}: server {}'s weights are not finite after the update; lower --lr", step, rank));
}

}  // namespace

Partial RangeUpdate::partial(double updateSeconds, double bytesOut, double bytesIn) const {
  // Each part's update was its finite check (a non-finite gradient would have thrown).
  if (eachPart_) return {partSumOfSquares_, 1.0, updateSeconds, bytesOut, bytesIn, portable::peakRssMib()};
  const at::Tensor sum = sum_.view(0, range_.size());
  return {optim::sumOfSquares(sum), roles::allFinite(sum) ? 1.0 : 0.0, updateSeconds, bytesOut, bytesIn,
          portable::peakRssMib()};
}

void RangeUpdate::apply(const Verdict& v, std::int64_t step, int rank) {
  if (!v.apply || eachPart_) return;
  const auto start = metrics::Clock::now();
  if (!optimizer_->step(weights_, sum_.view(0, range_.size()), v.lr, v.divisor)) throw notFinite(step, rank);
  updateSeconds_ += metrics::secondsSince(start);
}

void RangeUpdate::beginParts() {
  optimizer_->beginUpdate();
  partSumOfSquares_ = 0;
}

void RangeUpdate::applyPart(float* sum, std::int64_t at, std::int64_t n, const StepPlan& plan, std::int64_t step,
                            int rank) {
  const auto start = metrics::Clock::now();
  at::Tensor grad = at::from_blob(sum, {n}, at::kFloat);
  partSumOfSquares_ += optim::sumOfSquares(grad);
  if (!optimizer_->stepSlice(weights_.narrow(0, at, n), grad, plan.lr, at, range_.size(), plan.samples)) {
    throw notFinite(step, rank);
  }
  updateSeconds_ += metrics::secondsSince(start);
}

double RangeUpdate::takeUpdateSeconds() {
  const double seconds = updateSeconds_;
  updateSeconds_ = 0;
  return seconds;
}

namespace {

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

struct StateHeader {
  std::int64_t updates = 0;
  std::vector<std::string> names;
};

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
  expectBytes(comm.receive(data, bytes, from, context).bytes, bytes, from, what, context);
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

}  // namespace

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

Verdict decide(comm::Communicator& comm, roles::SummedUpdate& update, std::vector<Partial>& partials,
               std::int64_t step, Verdict v, double& gradNorm) {
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
    v.divisor = update.divisor(step, [&] { return finiteGradient; }, [&] { return sumOfSquares; });
    v.apply = v.divisor != 0;
    if (v.apply && !finiteGradient) throw update.nonFinite(step);
    if (v.apply) gradNorm = update.gradNorm();
  }
  for (std::size_t k = 1; k < partials.size(); ++k) sendValue(comm, v, static_cast<int>(k), context);
  return v;
}

Verdict receiveVerdict(comm::Communicator& comm, const Partial& partial, const std::string& context) {
  sendValue(comm, partial, 0, context);
  return receiveValue<Verdict>(comm, 0, context);
}

namespace {

// Server 0's request for floats [begin, end) of state `state` (a server's range of it, or of
// its weights: kWeights); kDone: the checkpoint is written.
struct StateRequest {
  static constexpr std::int64_t kDone = -1, kWeights = -2;
  std::int64_t state = kDone, begin = 0, end = 0;
};

}  // namespace

CheckpointGather::CheckpointGather(comm::Communicator& comm, std::vector<KeyRange> ranges, optim::Optimizer& whole,
                                   RangeUpdate& own)
    : comm_(comm), ranges_(std::move(ranges)), whole_(whole), own_(own) {}

void CheckpointGather::gather(float* model, const std::string& context) {
  const auto own = statesOf(own_.optimizer(), nullptr);
  if (placeholders_.size() != own.size()) {
    placeholders_.clear();
    for (std::size_t i = 0; i < own.size(); ++i) placeholders_.push_back(torch::empty({ranges_.back().end}));
  }
  for (std::size_t k = 1; k < ranges_.size(); ++k) {
    const StateHeader header = receiveStateHeader(comm_, static_cast<int>(k), context);
    if (header.names.size() != own.size()) {
      throw InternalError(fmt::format("{}: server {} holds {} optimizer states, server 0 {}", context, k,
                                      header.names.size(), own.size()));
    }
  }
  std::size_t i = 0;
  for (const auto& [name, buffer] : own_.optimizer().state()) whole_.restore(name, placeholders_[i++]);
  whole_.restoreUpdates(own_.optimizer().updates());
  model_ = model;
  serving_ = true;
}

void CheckpointGather::request(std::size_t k, std::int64_t state, std::int64_t begin, std::int64_t end, float* out) {
  sendValue(comm_, StateRequest{state, begin, end}, static_cast<int>(k), "checkpoint");
  receiveInto(comm_, out, static_cast<std::size_t>(end - begin) * sizeof(float), static_cast<int>(k),
              state == StateRequest::kWeights ? "range of the weights" : "range of the optimizer state", "checkpoint");
}

bool CheckpointGather::recordSource(const void* data, std::size_t bytes, const checkpoint::RecordWrite& write) {
  if (!serving_) return false;
  const char* const begin = static_cast<const char*>(data);
  const char* const end = begin + bytes;
  const std::int64_t total = ranges_.back().end;
  // The buffer whose placeholder floats [placeholderFrom, total) the memory overlaps: the
  // model's weights (outside range 0), or a state's placeholder. Its range 0 is `own`.
  const auto overlaps = [&](const float* buffer, std::int64_t placeholderFrom) {
    return begin < reinterpret_cast<const char*>(buffer + total) &&
           end > reinterpret_cast<const char*>(buffer + placeholderFrom);
  };
  std::int64_t state = StateRequest::kWeights;
  const float* base = overlaps(model_, ranges_[0].end) ? model_ : nullptr;
  const float* own = model_;
  for (std::size_t i = 0; !base && i < placeholders_.size(); ++i) {
    if (overlaps(placeholders_[i].data_ptr<float>(), 0)) {
      state = static_cast<std::int64_t>(i);
      base = placeholders_[i].data_ptr<float>();
      own = statesOf(own_.optimizer(), nullptr)[i].data_ptr<float>();
    }
  }
  if (!base) return false;
  // The memory may reach beyond the buffer (a TorchScript module saves the storage its
  // parameters view, a message with more than the weights): that part is written as it is.
  const auto* first = reinterpret_cast<const char*>(base);
  if (begin > first && (begin - first) % sizeof(float) != 0) throw InternalError("a record starts inside a float");
  const std::int64_t lo = begin > first ? static_cast<std::int64_t>((begin - first) / sizeof(float)) : 0;
  const std::int64_t hi = std::min<std::int64_t>(total, lo + static_cast<std::int64_t>((end - std::max(begin, first)) / sizeof(float)));
  if (begin < first) write(begin, static_cast<std::size_t>(first - begin));
  for (std::size_t k = 0; k < ranges_.size(); ++k) {
    const std::int64_t from = std::max(lo, ranges_[k].begin), to = std::min(hi, ranges_[k].end);
    if (k == 0 && from < to) write(own + from, static_cast<std::size_t>(to - from) * sizeof(float));
    // Another server's floats come a chunk at a time: server 0 never holds a tensor it does not own.
    for (std::int64_t at = from; k > 0 && at < to; at += kChunkFloats) {
      const std::int64_t until = std::min(to, at + kChunkFloats);
      chunk_.resize(static_cast<std::size_t>(kChunkFloats));
      request(k, state, at, until, chunk_.data());
      write(chunk_.data(), static_cast<std::size_t>(until - at) * sizeof(float));
    }
  }
  const auto* after = reinterpret_cast<const char*>(base + hi);
  if (end > after) write(after, static_cast<std::size_t>(end - after));
  return true;
}

void CheckpointGather::release() {
  if (!serving_) return;
  for (std::size_t k = 1; k < ranges_.size(); ++k) sendValue(comm_, StateRequest{}, static_cast<int>(k), "checkpoint");
  serving_ = false;
  std::vector<float>().swap(chunk_);
}

void offerCheckpoint(comm::Communicator& comm, const RangeUpdate& update, const std::string& context) {
  sendStateHeader(comm, update.optimizer(), 0, context);
}

void serveCheckpoint(comm::Communicator& comm, const float* weights, RangeUpdate& update, const std::string& context) {
  const auto states = statesOf(update.optimizer(), nullptr);
  for (auto request = receiveValue<StateRequest>(comm, 0, context); request.state != StateRequest::kDone;
       request = receiveValue<StateRequest>(comm, 0, context)) {
    const std::int64_t begin = request.begin - update.range().begin, end = request.end - update.range().begin;
    const bool known = request.state == StateRequest::kWeights ||
                       (request.state >= 0 && request.state < static_cast<std::int64_t>(states.size()));
    if (!known || begin < 0 || end > update.range().size() || begin >= end) {
      throw CommError(fmt::format("{}: server 0 asked for floats [{}, {}) of state {}, which this server does not hold",
                                  context, request.begin, request.end, request.state));
    }
    const float* from = request.state == StateRequest::kWeights
                            ? weights
                            : states[static_cast<std::size_t>(request.state)].data_ptr<float>();
    comm.send(from + begin, static_cast<std::size_t>(end - begin) * sizeof(float), 0, context);
  }
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
