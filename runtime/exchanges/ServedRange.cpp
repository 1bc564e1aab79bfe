#include "runtime/exchanges/ServedRange.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <utility>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/config/Codecs.h"
#include "runtime/config/Layout.h"
#include "runtime/config/MemoryPolicy.h"
#include "runtime/exchanges/Wire.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::exchanges {

namespace {

std::size_t bytesOf(const KeyRange& range) { return static_cast<std::size_t>(range.size()) * sizeof(float); }

// sum[0, n) += values.
void add(float* sum, const float* values, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) sum[i] += values[i];
}

}  // namespace

ServedRange::ServedRange(comm::Communicator& comm, const config::RunPlan& cfg, KeyRange range, at::Tensor weights,
                         const codec::Shapes& modelShapes, bool updatesOnArrival, Messages messages)
    : comm_(comm),
      cfg_(cfg),
      policy_(cfg),
      ownWeights_(weights.defined() ? 0 : static_cast<std::size_t>(range.size())),
      range_(std::move(range)),
      update_(cfg.updateRule(), range_, weights.defined() ? std::move(weights) : ownWeights_.view(0, range_.size()), modelShapes,
              updatesOnArrival) {
  if (update_.updatesOnArrival()) partSum_.resize(static_cast<std::size_t>(std::min(kPartFloats, range_.size())));
  if (messages == Messages::Elsewhere) return;
  if (cfg.compressesGradients()) {
    const bool feedback = config::errorFeedbackOn(cfg.errorFeedback, cfg.gradientCodec());
    // It only decodes, and a frame carries all that takes (randomk's indices): no seed.
    codec_ = codec::makeCodec(cfg.gradientCodec(), range_.shapes, 0, "compress", feedback);
    decoded_.resize(static_cast<std::size_t>(range_.size()));
  }
  if (cfg.compressesWeights()) {  // deterministic codecs (Codecs.h: no sparsifier codes weights): no seed
    weightCodec_ = codec::makeCodec(cfg.weightCodec(), range_.shapes, 0, "compress-weights");
  }
}

ServedRange::ServedRange(comm::Communicator& comm, const config::RunPlan& cfg, const models::Net& model,
                         bool updatesOnArrival)
    : ServedRange(comm, cfg, serverRanges(model, cfg)[static_cast<std::size_t>(comm.rank())], at::Tensor(),
                  protocol::parameterShapes(model), updatesOnArrival) {}

void ServedRange::startWeightsTo(const std::vector<int>& to, std::int64_t version, std::vector<std::size_t>& requests,
                                 const std::string& context) {
  const std::int64_t parts = partsOf(range_.size());
  const float* weights = update_.weights().data_ptr<float>();
  if (weightCodec_) {
    if (version != frameVersion_) {
      weightFrame_.clear();
      weightCodec_->encode(weights, weightFrame_);
      frameVersion_ = version;
    }
    for (int w : to) requests.push_back(comm_.startSend(weightFrame_.data(), weightFrame_.size(), w, kWeightsTag, context));
    bytesOut_ = static_cast<double>(weightFrame_.size());
    return;
  }
  if (!cfg_.bf16Weights()) {
    for (std::int64_t p = 0; p < parts; ++p) {
      for (int w : to) {
        requests.push_back(comm_.startSend(weights + p * kPartFloats, partSize(range_.size(), p) * sizeof(float), w,
                                           kWeightsTag, context));
      }
    }
    bytesOut_ = static_cast<double>(bytesOf(range_));
    return;
  }
  constexpr std::int64_t kStagedParts = 4;
  if (bf16_.numel() == 0) bf16_ = at::empty({kStagedParts, kPartFloats}, at::kBFloat16);
  std::vector<std::vector<std::size_t>> sending(kStagedParts);
  for (std::int64_t p = 0; p < parts; ++p) {
    auto& slot = sending[static_cast<std::size_t>(p % kStagedParts)];
    for (std::size_t request : slot) comm_.wait(request);
    slot.clear();
    const std::int64_t n = partSize(range_.size(), p);
    at::Tensor staged = bf16_[p % kStagedParts].narrow(0, 0, n);
    staged.copy_(update_.weights().narrow(0, p * kPartFloats, n));
    for (int w : to) {
      slot.push_back(comm_.startSend(staged.data_ptr(), static_cast<std::size_t>(n) * 2, w, kWeightsTag, context));
    }
  }
  for (auto& slot : sending) {
    for (std::size_t request : slot) comm_.wait(request);
  }
  bytesOut_ = static_cast<double>(range_.size()) * 2;
}

void ServedRange::sendWeightsTo(const std::vector<int>& to, std::int64_t version, const std::string& context) {
  std::vector<std::size_t> requests;
  startWeightsTo(to, version, requests, context);
  for (std::size_t request : requests) comm_.wait(request);
}

const float* ServedRange::valuesOf(const char* bytes, std::size_t got, std::int64_t part, int rank,
                                  const std::string& context) {
  if (!codec_) {
    expectBytes(got, partSize(range_.size(), part) * sizeof(float), rank, "part of the gradient", context);
    return reinterpret_cast<const float*>(bytes);
  }
  try {
    codec_->decode(bytes, got, decoded_.data());
  } catch (const CodecError& e) {
    throw CodecError(fmt::format("{}: rank {}: {}", context, rank, e.what()));
  }
  return decoded_.data();
}

void ServedRange::receiveGradients(const std::string& context, const StepPlan& plan, std::int64_t step) {
  const config::Layout layout(cfg_, comm_.size());
  const int first = layout.servers(), workers = layout.workers();  // the workers are ranks K on
  const std::int64_t parts = codec_ ? 1 : partsOf(range_.size());
  // Message m: part partOf(m) of worker m % workers; the parts come last first (Wire.h).
  const std::size_t messages = static_cast<std::size_t>(parts * workers);
  auto partOf = [&](std::size_t m) { return parts - 1 - static_cast<std::int64_t>(m / workers); };
  const bool updatesOnArrival = update_.updatesOnArrival();
  if (updatesOnArrival) update_.beginParts();
  // Raw, summed whole: worker 0's parts land straight in the sum, all posted at once. The
  // other messages take a ring of slots, in order: the memory policy's count for raw parts
  // (fast: one each), two frames for coded ones.
  const bool inPlace = !codec_ && !updatesOnArrival;
  std::vector<std::size_t> slotted;  // the messages that take a slot, in order
  for (std::size_t m = 0; m < messages; ++m) {
    if (!inPlace || m % workers != 0) slotted.push_back(m);
  }
  const int slottedWorkers = inPlace ? workers - 1 : workers;
  const std::size_t ring =
      useSlots(codec_ ? 2 : policy_.receiveSlots(slotted.size(), slottedWorkers, slotBytes()));
  std::vector<std::size_t> got(messages), requests(messages), slotOf(messages);
  for (std::size_t k = 0; k < slotted.size(); ++k) slotOf[slotted[k]] = k % std::max<std::size_t>(ring, 1);
  auto target = [&](std::size_t m) -> char* {
    if (inPlace && m % workers == 0) return reinterpret_cast<char*>(update_.sum() + partOf(m) * kPartFloats);
    return slots_[slotOf[m]].data();
  };
  auto post = [&](std::size_t m) {
    const std::size_t capacity = codec_ ? slots_[0].size() : partSize(range_.size(), partOf(m)) * sizeof(float);
    requests[m] = comm_.startReceive(target(m), capacity, first + static_cast<int>(m % workers), kGradTag, &got[m],
                                     context);
  };
  if (inPlace) {
    for (std::size_t m = 0; m < messages; m += static_cast<std::size_t>(workers)) post(m);
  }
  for (std::size_t k = 0; k < std::min(ring, slotted.size()); ++k) post(slotted[k]);
  std::size_t nextSlotted = std::min(ring, slotted.size());  // the next slotted message to post
  if (codec_) std::fill_n(update_.sum(), range_.size(), 0.0f);
  comm_.expectLongWait();  // the workers compute first
  double bytes = 0;
  for (std::size_t m = 0; m < messages; ++m) {
    const int rank = first + static_cast<int>(m % workers);
    comm_.wait(requests[m]);
    bytes += static_cast<double>(got[m]);
    const std::int64_t part = partOf(m);
    const float* values = valuesOf(target(m), got[m], part, rank, context);
    if (codec_) {
      add(update_.sum(), values, range_.size());
    } else if (!updatesOnArrival) {
      if (m % workers) add(update_.sum() + part * kPartFloats, values, partSize(range_.size(), part));
    } else {
      const std::int64_t n = partSize(range_.size(), part);
      if (m % workers == 0) std::copy_n(values, n, partSum_.data());
      if (m % workers) add(partSum_.data(), values, n);
      if (m % workers == static_cast<std::size_t>(workers) - 1) {
        if (!update_.stepPart(partSum_.data(), part * kPartFloats, n, plan.lr, plan.samples)) {
          throw weightsNotFinite(step, comm_.rank());
        }
      }
    }
    if ((!inPlace || m % workers != 0) && nextSlotted < slotted.size()) post(slotted[nextSlotted++]);  // its slot is free
  }
  bytesIn_ = bytes / workers;
}

std::size_t ServedRange::slotBytes() const {
  // A raw part is at most kPartFloats and never more than the range.
  return codec_ ? codec_->maxFrameBytes() : static_cast<std::size_t>(partSize(range_.size(), 0)) * sizeof(float);
}

std::size_t ServedRange::useSlots(std::size_t count) {
  if (slots_.size() < count) slots_.resize(count, std::vector<char>(slotBytes()));
  return count;
}

void ServedRange::receiveGradientOf(int worker, Use use, const std::string& context) {
  const std::int64_t parts = codec_ ? 1 : partsOf(range_.size());
  // A raw first gradient lands in the sum. The rest comes through slots: the memory policy's
  // count for one worker's raw parts, two frames for a coded one.
  const bool inPlace = use == Use::First && !codec_;
  const std::size_t ring = inPlace ? 0
                           : useSlots(codec_ ? 2 : policy_.receiveSlots(
                                                         static_cast<std::size_t>(parts), 1, slotBytes()));
  std::vector<std::size_t> requests(static_cast<std::size_t>(parts)), got(static_cast<std::size_t>(parts));
  auto partOf = [&](std::int64_t m) { return parts - 1 - m; };  // the parts come last first (Wire.h)
  auto target = [&](std::int64_t m) -> char* {
    if (inPlace) return reinterpret_cast<char*>(update_.sum() + partOf(m) * kPartFloats);
    return slots_[static_cast<std::size_t>(m) % ring].data();
  };
  auto post = [&](std::int64_t m) {
    if (m >= parts) return;
    const std::size_t capacity = codec_ ? slots_[0].size() : partSize(range_.size(), partOf(m)) * sizeof(float);
    requests[m] = comm_.startReceive(target(m), capacity, worker, kGradTag, &got[m], context);
  };
  for (std::int64_t m = 0; m < (inPlace ? parts : static_cast<std::int64_t>(ring)); ++m) post(m);
  double bytes = 0;
  for (std::int64_t m = 0; m < parts; ++m) {
    comm_.wait(requests[m]);
    bytes += static_cast<double>(got[m]);
    const float* values = valuesOf(target(m), got[m], partOf(m), worker, context);
    const std::int64_t at = partOf(m) * kPartFloats, n = codec_ ? range_.size() : partSize(range_.size(), partOf(m));
    if (use == Use::Add) add(update_.sum() + at, values, n);
    if (use == Use::First && codec_) std::copy_n(values, n, update_.sum());
    if (!inPlace) post(m + static_cast<std::int64_t>(ring));
  }
  bytesIn_ = bytes;
}

}  // namespace pstrain::exchanges
