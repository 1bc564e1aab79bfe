#include "runtime/exchanges/CheckpointGather.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/exchanges/StateMessages.h"

namespace pstrain::exchanges {

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

}  // namespace pstrain::exchanges
