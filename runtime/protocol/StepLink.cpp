#include "runtime/protocol/StepLink.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "runtime/Errors.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::protocol {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A payload of any size from `root` to every rank: its length, then its bytes.
void broadcastPayload(comm::Communicator& comm, std::string& payload, int root, const std::string& context) {
  std::uint64_t size = payload.size();
  comm.broadcast(&size, sizeof size, root, context);
  payload.resize(size);
  comm.broadcast(payload.data(), size, root, context);
}

}  // namespace

StepLink::StepLink(comm::Communicator& comm, const config::TrainConfig& cfg, const models::Net& model,
                   StepMessages& messages, std::uint64_t seed)
    : comm_(comm), messages_(messages) {
  const codec::Shapes shapes = parameterShapes(model);
  std::size_t capacity = messages.upBytes();
  if (cfg.compress != "none") {
    const bool feedback = codec::errorFeedbackOn(cfg.errorFeedback, cfg.compress);
    upEncoder_ = std::make_unique<codec::ErrorFeedbackEncoder>(
        codec::makeCodec(cfg.compress, shapes, seed, "compress", feedback), feedback);
    capacity = std::max(capacity, upEncoder_->codec().maxFrameBytes() +
                                       (messages.up.size() - static_cast<std::size_t>(messages.grad.numel())) * sizeof(float));
    decoded_.resize(messages.grad.numel());
  }
  if (cfg.compressWeights != "none") {
    codec::validateSpec(cfg.compressWeights, true, "compress-weights");
    downCodec_ = codec::makeCodec(cfg.compressWeights, shapes, seed, "compress-weights");
    capacity = std::max(capacity, downCodec_->maxFrameBytes() + sizeof(StepHeader) +
                                       static_cast<std::size_t>(messages.downTail.numel()) * sizeof(float));
  }
  if (upEncoder_ || downCodec_) inbox_.resize(capacity);  // raw messages are received in place
}

StepLink::Traffic StepLink::take() {
  Traffic t = traffic_;
  traffic_ = Traffic();
  return t;
}

// --- encoding ------------------------------------------------------------------------------

void StepLink::encodeUp() {
  const auto start = Clock::now();
  upPayload_.clear();
  upEncoder_->encode(messages_.grad.data_ptr<float>(), upPayload_);
  const double seconds = secondsSince(start);
  traffic_.codecSeconds += seconds;
  messages_.trailer[kCodecSeconds] = static_cast<float>(seconds + decodeSeconds_);
  decodeSeconds_ = 0;
  const float* raw = messages_.up.data() + messages_.grad.numel();
  upPayload_.append(reinterpret_cast<const char*>(raw), (messages_.up.size() - messages_.grad.numel()) * sizeof(float));
}

void StepLink::decodeUp(const char* payload, std::size_t size, float* up) {
  const auto start = Clock::now();
  const std::size_t n = messages_.grad.numel();
  const std::size_t rawBytes = (messages_.up.size() - n) * sizeof(float);
  if (size < rawBytes) throw CodecError(fmt::format("gradient payload of {} bytes is shorter than its fixed part", size));
  upEncoder_->codec().decode(payload, size - rawBytes, decoded_.data());
  for (std::size_t i = 0; i < n; ++i) up[i] += decoded_[i];
  const char* fixed = payload + size - rawBytes;
  for (std::size_t i = 0; i < rawBytes / sizeof(float); ++i) {
    float value;  // copied out: the payload need not be float-aligned
    std::memcpy(&value, fixed + i * sizeof(float), sizeof value);
    up[n + i] += value;
  }
  traffic_.codecSeconds += secondsSince(start);
}

void StepLink::encodeDown() {
  const auto start = Clock::now();
  downPayload_.assign(reinterpret_cast<const char*>(messages_.down.data()), sizeof(StepHeader));
  downPayload_.append(reinterpret_cast<const char*>(messages_.downTail.data_ptr<float>()),
                      messages_.downTail.numel() * sizeof(float));
  downCodec_->encode(messages_.weights.data_ptr<float>(), downPayload_);
  traffic_.codecSeconds += secondsSince(start);
}

void StepLink::decodeDown(const char* payload, std::size_t size) {
  const auto start = Clock::now();
  const std::size_t fixed = sizeof(StepHeader) + messages_.downTail.numel() * sizeof(float);
  if (size < fixed) throw CodecError(fmt::format("weights payload of {} bytes is shorter than its fixed part", size));
  std::memcpy(messages_.down.data(), payload, sizeof(StepHeader));
  std::memcpy(messages_.downTail.data_ptr<float>(), payload + sizeof(StepHeader), fixed - sizeof(StepHeader));
  downCodec_->decode(payload + fixed, size - fixed, messages_.weights.data_ptr<float>());
  const double seconds = secondsSince(start);
  traffic_.codecSeconds += seconds;
  decodeSeconds_ += seconds;  // the worker's next up message reports it
}

// --- transport -----------------------------------------------------------------------------

void StepLink::broadcastDown(const std::string& context) {
  traffic_.rawBytesDown = messages_.downBytes();
  if (!downCodec_) {
    comm_.broadcast(messages_.down.data(), messages_.downBytes(), 0, context);
    traffic_.bytesDown = messages_.downBytes();
    return;
  }
  if (comm_.rank() == 0) encodeDown();
  broadcastPayload(comm_, downPayload_, 0, context);
  if (comm_.rank() != 0) decodeDown(downPayload_.data(), downPayload_.size());
  traffic_.bytesDown = downPayload_.size();
}

void StepLink::reduceUp(const std::string& context) {
  traffic_.rawBytesUp = messages_.upBytes();
  if (comm_.rank() == 0) comm_.expectLongWait();  // the workers compute first
  if (!upEncoder_) {
    comm_.reduceSum(messages_.up.data(), messages_.up.size(), 0, context);
    traffic_.bytesUp = messages_.upBytes();
    return;
  }
  if (comm_.rank() != 0) encodeUp();
  auto payloads = comm_.gather(comm_.rank() == 0 ? std::string() : upPayload_, 0, context);
  if (comm_.rank() != 0) {
    traffic_.bytesUp = upPayload_.size();
    return;
  }
  std::fill(messages_.up.begin(), messages_.up.end(), 0.0f);  // the sum of the workers' payloads
  double bytes = 0;
  for (std::size_t r = 1; r < payloads.size(); ++r) {
    decodeUp(payloads[r].data(), payloads[r].size(), messages_.up.data());
    bytes += payloads[r].size();
  }
  traffic_.bytesUp = bytes / static_cast<double>(payloads.size() - 1);
}

void StepLink::startBucket(const Bucket& bucket, const std::string& context) {
  comm_.progress();
  buckets_.push_back(bucket);
  started_.push_back(comm_.startReduceSum(messages_.up.data() + bucket.begin, bucket.end - bucket.begin, 0, context));
}

void StepLink::startWeightsDown(const Bucket& bucket, const std::string& context) {
  started_.push_back(comm_.startBroadcast(messages_.weights.data_ptr<float>() + bucket.begin,
                                          (bucket.end - bucket.begin) * sizeof(float), 0, context));
}

void StepLink::startDownTail(const std::string& context) {
  started_.push_back(comm_.startBroadcast(messages_.downTail.data_ptr<float>(),
                                          messages_.downTail.numel() * sizeof(float), 0, context));
  started_.push_back(comm_.startBroadcast(messages_.down.data(), sizeof(StepHeader), 0, context));
}

void StepLink::waitStarted() {
  for (std::size_t request : started_) comm_.wait(request);
  started_.clear();
  buckets_.clear();
  traffic_.bytesUp = traffic_.rawBytesUp = messages_.upBytes();
  traffic_.bytesDown = traffic_.rawBytesDown = messages_.downBytes();
}

void StepLink::finishStep(const std::string& context) {
  const std::size_t n = messages_.grad.numel();
  started_.push_back(comm_.startReduceSum(messages_.up.data() + n, messages_.up.size() - n, 0, context));
  for (const Bucket& b : buckets_) startWeightsDown(b, context);
  startDownTail(context);
  waitStarted();
}

void StepLink::reduceUpInBuckets(const std::vector<Bucket>& buckets,
                                 const std::function<void(const Bucket&, at::Tensor& grad)>& reduced,
                                 const std::string& context) {
  // The workers start every reduction during backward; here at most kBucketsInFlight are
  // started ahead of the bucket being waited for: MPI may hold a temporary the size of each
  // started bucket (libnbc's reduce at the root does), and this keeps those to two
  // buckets instead of a whole gradient (LeNet, 2 workers: rank 0's peak 0.9 MiB lower than
  // with four, at the same speed; the buckets come in one after another anyway). A
  // bucket's weights can start down only once every reduction is started (the workers' order).
  constexpr std::size_t kBucketsInFlight = 2;
  // Bucket b is summed into slot b % kSlots: the one being handed over and those started
  // ahead of it are all in flight at once, and a slot is reused only after its bucket's call.
  constexpr std::size_t kSlots = kBucketsInFlight + 1;
  std::int64_t slotSize = 0;
  for (const Bucket& b : buckets) slotSize = std::max(slotSize, b.end - b.begin);
  if (!ring_ || ring_->size() < kSlots * static_cast<std::size_t>(slotSize)) {
    ring_ = std::make_unique<FloatBuffer>(kSlots * static_cast<std::size_t>(slotSize));
  }
  auto slotOffset = [&](std::size_t b) { return static_cast<std::int64_t>(b % kSlots) * slotSize; };
  const std::size_t n = messages_.grad.numel();
  std::vector<std::size_t> reductions;
  std::size_t rest = 0, updated = 0, sentDown = 0;
  auto startAhead = [&](std::size_t upTo) {
    while (reductions.size() < std::min(upTo, buckets.size())) {
      const Bucket& b = buckets[reductions.size()];
      reductions.push_back(comm_.startReduceSum(ring_->data() + slotOffset(reductions.size()), b.end - b.begin, 0, context));
      if (reductions.size() == buckets.size()) {
        rest = comm_.startReduceSum(messages_.up.data() + n, messages_.up.size() - n, 0, context);
      }
    }
  };
  startAhead(kBucketsInFlight);
  comm_.expectLongWait();  // for the first bucket: the workers' forward and most of backward
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    comm_.wait(reductions[b]);
    startAhead(b + 1 + kBucketsInFlight);
    at::Tensor grad = ring_->view(slotOffset(b), buckets[b].end - buckets[b].begin);
    reduced(buckets[b], grad);
    ++updated;
    if (reductions.size() < buckets.size()) continue;
    for (; sentDown < updated; ++sentDown) startWeightsDown(buckets[sentDown], context);
  }
  comm_.wait(rest);
}

void StepLink::finishDown(const std::string& context) {
  startDownTail(context);
  waitStarted();
}

void StepLink::allReduceUp(const std::string& context) {
  traffic_.rawBytesUp = messages_.upBytes();
  if (!upEncoder_) {
    comm_.allReduceSum(messages_.up.data(), messages_.up.size(), context);
    traffic_.bytesUp = messages_.upBytes();
    return;
  }
  encodeUp();
  auto payloads = comm_.allGather(upPayload_, context);
  std::fill(messages_.up.begin(), messages_.up.end(), 0.0f);
  for (const auto& payload : payloads) decodeUp(payload.data(), payload.size(), messages_.up.data());  // rank order: equal sums
  traffic_.bytesUp = upPayload_.size();
}

void StepLink::packDown() {
  if (downCodec_) encodeDown();
}

void StepLink::sendDown(int worker, const std::string& context) {
  traffic_.rawBytesDown = messages_.downBytes();
  if (!downCodec_) {
    comm_.send(messages_.down.data(), messages_.downBytes(), worker, context);
    traffic_.bytesDown = messages_.downBytes();
  } else {
    comm_.send(downPayload_.data(), downPayload_.size(), worker, context);
    traffic_.bytesDown = downPayload_.size();
  }
}

void StepLink::receiveDown(const std::string& context) {
  traffic_.rawBytesDown = messages_.downBytes();
  if (!downCodec_) {
    const auto got = comm_.receive(messages_.down.data(), messages_.downBytes(), 0, context);
    if (got.bytes != messages_.downBytes()) {
      throw CommError(fmt::format("{}: the server sent {} bytes, a weights message is {}", context, got.bytes,
                                  messages_.downBytes()));
    }
    traffic_.bytesDown = messages_.downBytes();
    return;
  }
  auto got = comm_.receive(inbox_.data(), inbox_.size(), 0, context);
  decodeDown(inbox_.data(), got.bytes);
  traffic_.bytesDown = got.bytes;
}

void StepLink::sendUp(const std::string& context) {
  traffic_.rawBytesUp = messages_.upBytes();
  if (!upEncoder_) {
    comm_.send(messages_.up.data(), messages_.upBytes(), 0, context);
    traffic_.bytesUp = messages_.upBytes();
    return;
  }
  encodeUp();
  comm_.send(upPayload_.data(), upPayload_.size(), 0, context);
  traffic_.bytesUp = upPayload_.size();
}

int StepLink::receiveUp(float* up, const std::string& context) {
  traffic_.rawBytesUp = messages_.upBytes();
  if (!upEncoder_) {
    auto got = comm_.receive(up, messages_.upBytes(), comm::Communicator::kAnySource, context);
    if (got.bytes != messages_.upBytes()) {
      throw CommError(fmt::format("{}: rank {} sent {} bytes, a gradient message is {}", context, got.source, got.bytes,
                                  messages_.upBytes()));
    }
    traffic_.bytesUp = got.bytes;
    return got.source;
  }
  auto got = comm_.receive(inbox_.data(), inbox_.size(), comm::Communicator::kAnySource, context);
  std::fill(up, up + messages_.up.size(), 0.0f);
  decodeUp(inbox_.data(), got.bytes, up);
  traffic_.bytesUp = got.bytes;
  return got.source;
}

}  // namespace pstrain::protocol
