#include "runtime/protocol/StepLink.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/Errors.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::protocol {

StepLink::StepLink(comm::Communicator& comm, const config::RunPlan& cfg, const models::Net& model,
                   StepMessages& messages, std::uint64_t seed)
    : comm_(comm),
      messages_(messages),
      up_(makeUpFrame(cfg, model, messages, seed)),
      down_(makeDownFrame(cfg, model, messages, seed)),
      policy_(cfg) {
  if (cfg.bf16Weights() && messages.weights.scalar_type() == at::kFloat) {  // the server's, to bfloat16 workers
    bf16Wire_ = std::make_unique<FloatBuffer>(weightFloats(static_cast<std::size_t>(messages.weights.numel()), true));
  }
}

StepLink::Traffic StepLink::take() {
  traffic_.codecSeconds += up_->takeCodecSeconds() + down_->takeCodecSeconds();
  return std::exchange(traffic_, Traffic());
}

// --- the whole messages, every mode ----------------------------------------------------------

void StepLink::broadcastDown(const std::string& context) {
  const bool root = comm_.rank() == 0;
  if (root) down_->pack();
  std::uint64_t size = root || down_->fixedSize() ? down_->packed().size : 0;
  if (!down_->fixedSize()) comm_.broadcast(&size, sizeof size, 0, context);  // a frame's size varies
  const Bytes bytes = root ? down_->packed() : down_->inbox(size);
  comm_.broadcast(bytes.data, size, 0, context);
  if (!root) down_->accept(bytes.data, size);
  countDown(size);
}

void StepLink::reduceUp(const std::string& context) {
  const bool root = comm_.rank() == 0;
  if (root) comm_.expectLongWait();  // the workers compute first
  if (up_->summable()) {
    comm_.reduceSum(messages_.up.data(), messages_.up.size(), 0, context);
    return countUp(messages_.upBytes());
  }
  const Bytes mine = root ? Bytes{} : up_->encode(down_->takeDecodeSeconds());
  const auto payloads = comm_.gather(std::string(mine.data, mine.size), 0, context);
  if (!root) return countUp(mine.size);
  std::fill(messages_.up.begin(), messages_.up.end(), 0.0f);  // the sum of the workers' payloads
  double bytes = 0, senders = 0;  // the ranks but this root: the workers
  for (std::size_t r = 1; r < payloads.size(); ++r, ++senders) {
    up_->addTo(payloads[r].data(), payloads[r].size(), messages_.up.data());
    bytes += static_cast<double>(payloads[r].size());
  }
  countUp(bytes / senders);
}

void StepLink::allReduceUp(const std::string& context) {
  if (up_->summable()) {
    comm_.allReduceSum(messages_.up.data(), messages_.up.size(), context);
    return countUp(messages_.upBytes());
  }
  const Bytes mine = up_->encode(down_->takeDecodeSeconds());
  const auto payloads = comm_.allGather(std::string(mine.data, mine.size), context);
  std::fill(messages_.up.begin(), messages_.up.end(), 0.0f);
  for (const auto& payload : payloads) up_->addTo(payload.data(), payload.size(), messages_.up.data());  // rank order: equal sums
  countUp(mine.size);
}

void StepLink::countUp(double bytes) {
  traffic_.bytesUp = bytes;
  traffic_.rawBytesUp = static_cast<double>(messages_.upBytes());
}

void StepLink::countDown(double bytes) {
  traffic_.bytesDown = bytes;
  traffic_.rawBytesDown = static_cast<double>(messages_.downBytes());
}

// --- diloco with overlapped rounds: raw messages, a round late ------------------------------

void StepLink::startRoundExchange(const std::string& context) {
  if (!up_->summable() || !down_->fixedSize()) {
    throw InternalError("overlapped rounds take raw messages (--overlap-rounds refuses codecs)");
  }
  started_.push_back(comm_.startReduceSum(messages_.up.data(), messages_.up.size(), 0, context));
  roundInbox_ = down_->inbox(down_->packed().size);
  started_.push_back(comm_.startBroadcast(roundInbox_.data, roundInbox_.size, 0, context));
}

void StepLink::finishRoundExchange(const std::string& context) {
  waitStarted();
  try {
    down_->accept(roundInbox_.data, roundInbox_.size);
  } catch (const CommError& e) {
    throw CommError(fmt::format("{}: {}", context, e.what()));
  }
}

// --- sync with overlap: raw messages in pieces ------------------------------------------------

void StepLink::startBucket(const Bucket& bucket, const std::string& context) {
  comm_.progress();
  const std::size_t window = policy_.sendWindow((bucket.end - bucket.begin) * static_cast<std::int64_t>(sizeof(float)));
  while (inFlight_.size() >= window) finishOldestBucket();
  buckets_.push_back(bucket);
  inFlight_.emplace_back(comm_.startReduceSum(messages_.up.data() + bucket.begin, bucket.end - bucket.begin, 0, context),
                         bucket);
}

void StepLink::finishOldestBucket() {
  const auto& [request, bucket] = inFlight_.front();
  comm_.wait(request);
  if (policy_.givesPagesBack()) messages_.up.release(bucket.begin, bucket.end - bucket.begin);
  inFlight_.pop_front();
}

void StepLink::startWeightsDown(const Bucket& bucket, const std::string& context) {
  const std::int64_t count = bucket.end - bucket.begin;
  if (!bf16Wire_) {  // the weights as this rank holds them, in place
    auto* weights = static_cast<char*>(messages_.weights.data_ptr());
    const std::size_t size = messages_.weights.element_size();
    started_.push_back(comm_.startBroadcast(weights + bucket.begin * size, count * size, 0, context));
    return;
  }
  // The server's float32 weights to workers that hold bfloat16 ones: converted bucket by
  // bucket into a staging buffer, whose pages go back once the step's buckets are out (lean).
  const at::Tensor staged = bf16Wire_->view(0, static_cast<std::int64_t>(bf16Wire_->size())).view(at::kBFloat16);
  staged.narrow(0, bucket.begin, count).copy_(messages_.weights.narrow(0, bucket.begin, count));
  started_.push_back(comm_.startBroadcast(reinterpret_cast<char*>(bf16Wire_->data()) + bucket.begin * 2, count * 2, 0,
                                          context));
}

void StepLink::startDownTail(const std::string& context) {
  started_.push_back(comm_.startBroadcast(messages_.downTail.data_ptr<float>(),
                                          messages_.downTail.numel() * sizeof(float), 0, context));
  started_.push_back(comm_.startBroadcast(messages_.down.data(), sizeof(StepHeader), 0, context));
}

void StepLink::waitStarted() {
  for (std::size_t request : started_) comm_.wait(request);
  started_.clear();
  if (bf16Wire_ && policy_.givesPagesBack()) bf16Wire_->release(0, static_cast<std::int64_t>(bf16Wire_->size()));
  buckets_.clear();
  countUp(messages_.upBytes());
  countDown(messages_.downBytes());
}

void StepLink::finishStep(const std::string& context) {
  // The rest of the step's collectives start first, in the workers' order, so that none
  // waits for the buckets' reductions to end (MPI moves them all while this rank waits);
  // then those end, their pages given back under lean.
  started_.push_back(comm_.startReduceSum(messages_.tail(), messages_.tailFloats(), 0, context));
  for (const Bucket& b : buckets_) startWeightsDown(b, context);
  startDownTail(context);
  while (!inFlight_.empty()) finishOldestBucket();
  waitStarted();
}

void StepLink::reduceUpInBuckets(const std::vector<Bucket>& buckets,
                                 const std::function<void(const Bucket&, at::Tensor& grad)>& reduced,
                                 const std::string& context) {
  // The workers start every reduction during backward; here at most kBucketsInFlight are
  // started ahead of the bucket being waited for: MPI may hold a temporary the size of each
  // started bucket (libnbc's reduce at the root does), and this keeps those to two
  // buckets instead of a whole gradient, at the same speed (the buckets come in one after
  // another anyway). A bucket's weights can start down only once every reduction is
  // started (the workers' order).
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
  std::vector<std::size_t> reductions;
  std::size_t rest = 0, updated = 0, sentDown = 0;
  auto startAhead = [&](std::size_t upTo) {
    while (reductions.size() < std::min(upTo, buckets.size())) {
      const Bucket& b = buckets[reductions.size()];
      reductions.push_back(comm_.startReduceSum(ring_->data() + slotOffset(reductions.size()), b.end - b.begin, 0, context));
      if (reductions.size() == buckets.size()) {
        rest = comm_.startReduceSum(messages_.tail(), messages_.tailFloats(), 0, context);
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

void StepLink::finishUp(const std::string& context) {
  const std::size_t rest = comm_.startReduceSum(messages_.tail(), messages_.tailFloats(), 0, context);  // as finishStep
  while (!inFlight_.empty()) finishOldestBucket();
  comm_.wait(rest);
  countUp(messages_.upBytes());
}

void StepLink::reduceUpBuckets(const std::vector<Bucket>& buckets, const std::string& context) {
  // A few reductions out at once: MPI may hold a temporary the size of each at the root.
  constexpr std::size_t kBucketsInFlight = 3;
  comm_.expectLongWait();  // the workers compute first
  std::deque<std::size_t> out;
  for (const Bucket& b : buckets) {
    if (out.size() == kBucketsInFlight) {
      comm_.wait(out.front());
      out.pop_front();
    }
    out.push_back(comm_.startReduceSum(messages_.up.data() + b.begin, b.end - b.begin, 0, context));
  }
  for (std::size_t request : out) comm_.wait(request);
  comm_.wait(comm_.startReduceSum(messages_.tail(), messages_.tailFloats(), 0, context));
  countUp(messages_.upBytes());
}

void StepLink::finishDown(const std::string& context) {
  startDownTail(context);
  waitStarted();
}

}  // namespace pstrain::protocol
