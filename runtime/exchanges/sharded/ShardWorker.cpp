#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/Stop.h"
#include "runtime/codec/Codec.h"
#include "runtime/config/Codecs.h"
#include "runtime/exchanges/Ranges.h"
#include "runtime/exchanges/sharded/Shards.h"
#include "runtime/exchanges/sharded/Wire.h"
#include "runtime/metrics/Clock.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/LocalTrainer.h"

namespace pstrain::exchanges::sharded {

using namespace protocol;

namespace {

// A worker's two messages, range by range (Wire.h).
class WorkerLink {
 public:
  WorkerLink(const roles::RoleArgs& a, StepMessages& messages)
      : comm_(a.comm), messages_(messages), ranges_(rangesOf(a.model, a.cfg)) {
    if (a.cfg.compressesWeights()) {  // a decoder and a frame's room per range (each server codes its own)
      for (const KeyRange& range : ranges_) {
        weightDecoders_.push_back(codec::makeCodec(a.cfg.weightCodec(), range.shapes, 0, "compress-weights"));
        weightFrames_.emplace_back(weightDecoders_.back()->maxFrameBytes());
      }
    }
    if (!a.cfg.compressesGradients()) return;
    const bool feedback = config::errorFeedbackOn(a.cfg.errorFeedback, a.cfg.gradientCodec());
    for (std::size_t k = 0; k < ranges_.size(); ++k) {
      const std::uint64_t seed = a.cfg.seed * 7919u + static_cast<std::uint64_t>(comm_.rank()) + 104729u * k;
      encoders_.push_back(std::make_unique<codec::ErrorFeedbackEncoder>(
          codec::makeCodec(a.cfg.gradientCodec(), ranges_[k].shapes, seed, "compress", feedback), feedback));
    }
    payloads_.resize(ranges_.size());
  }

  // Every range of the weights from its server (decoded, with a weight codec), and the
  // header and the rest from server 0.
  StepHeader receiveDown(const std::string& context) {
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

  // With a weight codec: one frame of each range, decoded into the weights once all are in.
  StepHeader receiveCodedDown(const std::string& context) {
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

  // Raw: the gradient's parts as they travel (Wire.h), in the order backward makes them:
  // from the flat gradient's end, every range's last part first.
  std::vector<Bucket> parts(const models::Net& model) const {
    std::vector<std::pair<std::int64_t, std::int64_t>> spans;
    for (auto r = ranges_.rbegin(); r != ranges_.rend(); ++r) {
      for (std::int64_t part = partsOf(r->size()) - 1; part >= 0; --part) {
        spans.emplace_back(r->begin + part * kPartFloats, r->begin + part * kPartFloats + partSize(r->size(), part));
      }
    }
    return bucketsAt(model, spans);
  }

  // Raw: starts sending the gradient's part `part` to its server (from inside backward),
  // having first waited for the oldest while more than kBytesInFlight are out, whose pages
  // then go back: the worker holds the parts in flight, never a whole gradient.
  void startPart(const Bucket& part, const std::string& context) {
    constexpr std::size_t kPartsInFlight = 4;  // 16 MiB
    while (inFlight_.size() >= kPartsInFlight) finishOldestPart();
    const auto range = std::upper_bound(ranges_.begin(), ranges_.end(), part.begin,
                                        [](std::int64_t at, const KeyRange& r) { return at < r.end; });
    const int server = static_cast<int>(range - ranges_.begin());
    inFlight_.emplace_back(comm_.startSend(messages_.grad.data_ptr<float>() + part.begin,
                                           static_cast<std::size_t>(part.end - part.begin) * sizeof(float), server,
                                           kGradTag, context),
                           part);
  }

  // Raw, after backward: the parts still out, then the buffers and trailer to server 0.
  void finishUp(const std::string& context) {
    while (!inFlight_.empty()) finishOldestPart();
    sendTail(context);
  }

  // Coded: every range of the gradient to its server, a frame each made with its own codec,
  // and the buffers and trailer to server 0.
  void sendUp(const std::string& context) {
    const float* grad = messages_.grad.data_ptr<float>();
    if (!encoders_.empty()) {
      const auto start = metrics::Clock::now();
      for (std::size_t k = 0; k < ranges_.size(); ++k) {
        payloads_[k].clear();
        encoders_[k]->encode(grad + ranges_[k].begin, payloads_[k]);
      }
      codecSeconds_ += metrics::secondsSince(start);
    }
    std::vector<std::size_t> requests;
    for (std::size_t k = 0; k < ranges_.size(); ++k) {
      requests.push_back(comm_.startSend(payloads_[k].data(), payloads_[k].size(), static_cast<int>(k), kGradTag,
                                         context));
    }
    for (std::size_t request : requests) comm_.wait(request);
    sendTail(context);
  }

  bool coded() const { return !encoders_.empty(); }

 private:
  comm::Communicator& comm_;
  StepMessages& messages_;

  // The header, buffers and shares from server 0 beside the weights' `requests`; once all are
  // in, `weightsIn` checks (and decodes) the weights.
  template <typename WeightsIn>
  StepHeader finishDown(std::vector<std::size_t>& requests, WeightsIn weightsIn, const std::string& context) {
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

  // The trailer's codec seconds (encoding the gradient, decoding the weights), then the
  // buffers and trailer to server 0.
  void sendTail(const std::string& context) {
    messages_.trailer[kCodecSeconds] = static_cast<float>(std::exchange(codecSeconds_, 0.0));
    const std::size_t n = static_cast<std::size_t>(messages_.grad.numel());
    comm_.wait(comm_.startSend(messages_.up.data() + n, (messages_.up.size() - n) * sizeof(float), 0, kTailTag,
                               context));
  }

  void finishOldestPart() {
    const auto& [request, part] = inFlight_.front();
    comm_.wait(request);
    messages_.up.release(part.begin, part.end - part.begin);
    inFlight_.pop_front();
  }

  const std::vector<KeyRange> ranges_;
  std::vector<std::unique_ptr<codec::ErrorFeedbackEncoder>> encoders_;  // by range, with a gradient codec
  std::vector<std::string> payloads_;
  std::deque<std::pair<std::size_t, Bucket>> inFlight_;  // raw: parts out, oldest first
  std::vector<std::unique_ptr<codec::Codec>> weightDecoders_;  // by range, with a weight codec
  std::vector<std::vector<char>> weightFrames_;               // by range: its frame's room
  double codecSeconds_ = 0;  // since the last trailer
};

}  // namespace

void work(const roles::RoleArgs& args) {
  const config::TrainConfig& cfg = args.cfg;
  comm::Communicator& comm = args.comm;
  StepMessages messages(models::parameterCount(args.model), bufferCount(args.model), comm.size(), args.device,
                        cfg.bf16Weights());
  roles::LocalTrainer trainer(cfg, args.model, *args.train, args.device, messages, comm.rank() - cfg.servers,
                              comm.size() - cfg.servers, comm.rank());
  WorkerLink link(args, messages);
  std::string context;
  const std::vector<Bucket> parts = link.coded() ? std::vector<Bucket>() : link.parts(args.model);
  const bool stream = cfg.streamsGradients();
  if (stream) trainer.streamGradients(parts, [&](const Bucket& part) { link.startPart(part, context); });
  auto receiveWeights = [&](std::int64_t step) {
    const StepHeader header = link.receiveDown(fmt::format("step {}", step));
    trainer.loadWeights();
    if (cfg.balance()) trainer.assign(roles::shardsOfRank(messages.shares.data_ptr<float>(), comm.size(), comm.rank()));
    return header;
  };
  for (StepHeader header = receiveWeights(0); header.control != Control::Stop;) {
    currentStep() = header.step;
    context = fmt::format("step {}", header.step);
    trainer.computeGradient(header.step, header.step, header.lossScale);
    if (link.coded()) {
      link.sendUp(context);
    } else {
      if (!stream) {  // --overlap off: the whole gradient, then its parts in the same order
        for (const Bucket& part : parts) link.startPart(part, context);
      }
      link.finishUp(context);
    }
    header = receiveWeights(header.step + 1);
  }
}

}  // namespace pstrain::exchanges::sharded
