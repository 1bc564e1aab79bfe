#include "runtime/exchanges/RangesLink.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>

#include "runtime/Errors.h"
#include "runtime/config/Codecs.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/ServerRanges.h"
#include "runtime/exchanges/Wire.h"
#include "runtime/metrics/Clock.h"

namespace pstrain::exchanges {

using namespace protocol;

namespace {

// The parts of `ranges` (Wire.h) as buckets of `model`'s parameters, in the order backward
// makes them: from the flat gradient's end, every range's last part first.
std::vector<Bucket> partBuckets(const models::Net& model, const std::vector<KeyRange>& ranges) {
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  for (auto r = ranges.rbegin(); r != ranges.rend(); ++r) {
    for (std::int64_t part = partsOf(r->size()) - 1; part >= 0; --part) {
      spans.emplace_back(r->begin + part * kPartFloats, r->begin + part * kPartFloats + partSize(r->size(), part));
    }
  }
  return bucketsAt(model, spans);
}

}  // namespace

RangesLink::RangesLink(comm::Communicator& comm, const config::RunPlan& cfg, const models::Net& model,
                       StepMessages& messages, Tail tail)
    : comm_(comm),
      messages_(messages),
      tail_(tail),
      ranges_(serverRanges(model, cfg)),
      parts_(partBuckets(model, ranges_)),
      policy_(cfg) {
  if (cfg.compressesWeights()) {  // a decoder and a frame's room per range (each server codes its own)
    for (const KeyRange& range : ranges_) {
      weightDecoders_.push_back(codec::makeCodec(cfg.weightCodec(), range.shapes, 0, "compress-weights"));
      weightFrames_.emplace_back(weightDecoders_.back()->maxFrameBytes());
    }
  }
  if (!cfg.compressesGradients()) return;
  const bool feedback = config::errorFeedbackOn(cfg.errorFeedback, cfg.gradientCodec());
  for (std::size_t k = 0; k < ranges_.size(); ++k) {
    const std::uint64_t seed = cfg.seed * 7919u + static_cast<std::uint64_t>(comm_.rank()) + 104729u * k;
    encoders_.push_back(std::make_unique<codec::ErrorFeedbackEncoder>(
        codec::makeCodec(cfg.gradientCodec(), ranges_[k].shapes, seed, "compress", feedback), feedback));
  }
  payloads_.resize(ranges_.size());
}

StepHeader RangesLink::receiveDown(const std::string& context) {
  if (!weightDecoders_.empty()) return receiveCodedDown(context);
  struct Part {
    int server;
    std::int64_t first;  // its first float of the weights
    std::size_t bytes, got = 0;
  };
  std::vector<Part> parts;
  auto* weights = static_cast<char*>(messages_.weights.data_ptr());  // float32 or bfloat16, as this worker holds them
  const std::size_t size = messages_.weights.element_size();
  for (int k = 0; k < static_cast<int>(ranges_.size()); ++k) {
    for (std::int64_t p = 0; p < partsOf(ranges_[k].size()); ++p) {
      parts.push_back({k, ranges_[k].begin + p * kPartFloats, partSize(ranges_[k].size(), p) * size});
    }
  }
  std::vector<std::size_t> requests;
  for (Part& part : parts) {
    requests.push_back(comm_.startReceive(weights + part.first * static_cast<std::int64_t>(size), part.bytes,
                                          part.server, kWeightsTag, &part.got, context));
  }
  return finishDown(requests, [&] {
    for (const Part& part : parts) expectBytes(part.got, part.bytes, part.server, "part of the weights", context);
  }, context);
}

StepHeader RangesLink::receiveCodedDown(const std::string& context) {
  std::vector<std::size_t> requests, got(ranges_.size());
  for (std::size_t k = 0; k < ranges_.size(); ++k) {
    requests.push_back(comm_.startReceive(weightFrames_[k].data(), weightFrames_[k].size(), static_cast<int>(k),
                                          kWeightsTag, &got[k], context));
  }
  return finishDown(requests, [&] {
    const auto start = metrics::Clock::now();
    float* weights = messages_.weights.data_ptr<float>();
    for (std::size_t k = 0; k < ranges_.size(); ++k) {
      try {
        weightDecoders_[k]->decode(weightFrames_[k].data(), got[k], weights + ranges_[k].begin);
      } catch (const CodecError& e) {
        throw CodecError(fmt::format("{}: the weights from server {}: {}", context, k, e.what()));
      }
    }
    codecSeconds_ += metrics::secondsSince(start);
  }, context);
}

void RangesLink::startPart(const Bucket& part, const std::string& context) {
  while (inFlight_.size() >= policy_.sendWindow((part.end - part.begin) * static_cast<std::int64_t>(sizeof(float)))) {
    finishOldestPart();
  }
  const auto range = std::upper_bound(ranges_.begin(), ranges_.end(), part.begin,
                                      [](std::int64_t at, const KeyRange& r) { return at < r.end; });
  const int server = static_cast<int>(range - ranges_.begin());
  inFlight_.emplace_back(comm_.startSend(messages_.grad.data_ptr<float>() + part.begin,
                                         static_cast<std::size_t>(part.end - part.begin) * sizeof(float), server,
                                         kGradTag, context),
                         part);
}

void RangesLink::finishUp(const std::string& context) {
  while (!inFlight_.empty()) finishOldestPart();
  sendTail(context);
}

void RangesLink::sendUp(const std::string& context) {
  const float* grad = messages_.grad.data_ptr<float>();
  if (coded()) {
    const auto start = metrics::Clock::now();
    for (std::size_t k = 0; k < ranges_.size(); ++k) {
      payloads_[k].clear();
      encoders_[k]->encode(grad + ranges_[k].begin, payloads_[k]);
    }
    codecSeconds_ += metrics::secondsSince(start);
  }
  if (tail_ == Tail::First) sendTail(context);
  if (!coded()) {
    for (const Bucket& part : parts_) startPart(part, context);
    while (!inFlight_.empty()) finishOldestPart();
  } else {
    std::vector<std::size_t> requests;
    for (std::size_t k = 0; k < ranges_.size(); ++k) {
      requests.push_back(comm_.startSend(payloads_[k].data(), payloads_[k].size(), static_cast<int>(k), kGradTag,
                                         context));
    }
    for (std::size_t request : requests) comm_.wait(request);
  }
  if (tail_ == Tail::After) sendTail(context);
}

template <typename WeightsIn>
StepHeader RangesLink::finishDown(std::vector<std::size_t>& requests, WeightsIn weightsIn, const std::string& context) {
  const std::size_t tailBytes = static_cast<std::size_t>(messages_.downTail.numel()) * sizeof(float);
  std::size_t headerGot = 0, tailGot = 0;
  requests.push_back(comm_.startReceive(messages_.down.data(), sizeof(StepHeader), 0, kHeadTag, &headerGot, context));
  requests.push_back(comm_.startReceive(messages_.downTail.data_ptr<float>(), tailBytes, 0, kHeadTag, &tailGot, context));
  comm_.expectLongWait();
  for (std::size_t request : requests) comm_.wait(request);
  expectBytes(headerGot, sizeof(StepHeader), 0, "step header", context);
  expectBytes(tailGot, tailBytes, 0, "buffers message", context);
  weightsIn();
  return messages_.header();
}

void RangesLink::sendTail(const std::string& context) {
  messages_.trailer[kCodecSeconds] = static_cast<float>(std::exchange(codecSeconds_, 0.0));
  const std::size_t bytes = messages_.tailFloats() * sizeof(float);
  if (tail_ == Tail::First) return comm_.send(messages_.tail(), bytes, 0, context);
  comm_.wait(comm_.startSend(messages_.tail(), bytes, 0, kTailTag, context));
}

void RangesLink::finishOldestPart() {
  const auto& [request, part] = inFlight_.front();
  comm_.wait(request);
  if (policy_.givesPagesBack()) messages_.up.release(part.begin, part.end - part.begin);
  inFlight_.pop_front();
}

}  // namespace pstrain::exchanges
