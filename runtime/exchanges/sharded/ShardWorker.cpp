#include <fmt/format.h>

#include <memory>
#include <string>
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
#include "runtime/roles/LocalTrainer.h"

namespace pstrain::exchanges::sharded {

using namespace protocol;

namespace {

// A worker's two messages, range by range (Wire.h).
class WorkerLink {
 public:
  WorkerLink(const roles::RoleArgs& a, StepMessages& messages)
      : comm_(a.comm), messages_(messages), ranges_(rangesOf(a.model, a.cfg)) {
    if (!a.cfg.compressesGradients()) return;
    const bool feedback = config::errorFeedbackOn(a.cfg.errorFeedback, a.cfg.gradientCodec());
    for (std::size_t k = 0; k < ranges_.size(); ++k) {
      const std::uint64_t seed = a.cfg.seed * 7919u + static_cast<std::uint64_t>(comm_.rank()) + 104729u * k;
      encoders_.push_back(std::make_unique<codec::ErrorFeedbackEncoder>(
          codec::makeCodec(a.cfg.gradientCodec(), ranges_[k].shapes, seed, "compress", feedback), feedback));
    }
    payloads_.resize(ranges_.size());
  }

  // Every range of the weights from its server, and the header and the rest from server 0.
  StepHeader receiveDown(const std::string& context) {
    const int servers = static_cast<int>(ranges_.size());
    std::vector<std::size_t> got(ranges_.size() + 2), requests;
    float* weights = messages_.weights.data_ptr<float>();
    for (int k = 0; k < servers; ++k) {
      requests.push_back(comm_.startReceive(weights + ranges_[k].begin, bytesOf(ranges_[k]), k, kWeightsTag, &got[k],
                                            context));
    }
    const std::size_t tailBytes = static_cast<std::size_t>(messages_.downTail.numel()) * sizeof(float);
    requests.push_back(comm_.startReceive(messages_.down.data(), sizeof(StepHeader), 0, kHeadTag, &got[servers], context));
    requests.push_back(comm_.startReceive(messages_.downTail.data_ptr<float>(), tailBytes, 0, kHeadTag,
                                          &got[servers + 1], context));
    comm_.expectLongWait();
    for (std::size_t request : requests) comm_.wait(request);
    for (int k = 0; k < servers; ++k) expectBytes(got[k], bytesOf(ranges_[k]), k, "range of the weights", context);
    expectBytes(got[servers], sizeof(StepHeader), 0, "step header", context);
    expectBytes(got[servers + 1], tailBytes, 0, "buffers message", context);
    return messages_.header();
  }

  // Every range of the gradient to its server (raw in parts, or coded with its own codec), and the
  // buffers and trailer to server 0.
  void sendUp(const std::string& context) {
    const float* grad = messages_.grad.data_ptr<float>();
    if (!encoders_.empty()) {
      const auto start = metrics::Clock::now();
      for (std::size_t k = 0; k < ranges_.size(); ++k) {
        payloads_[k].clear();
        encoders_[k]->encode(grad + ranges_[k].begin, payloads_[k]);
      }
      messages_.trailer[kCodecSeconds] = static_cast<float>(metrics::secondsSince(start));
    }
    std::vector<std::size_t> requests;
    for (std::size_t k = 0; k < ranges_.size(); ++k) {
      const int server = static_cast<int>(k);
      if (!encoders_.empty()) {
        requests.push_back(comm_.startSend(payloads_[k].data(), payloads_[k].size(), server, kGradTag, context));
        continue;
      }
      const KeyRange& r = ranges_[k];
      for (std::int64_t part = 0; part < partsOf(r.size()); ++part) {
        requests.push_back(comm_.startSend(grad + r.begin + part * kPartFloats,
                                           partSize(r.size(), part) * sizeof(float), server, kGradTag, context));
      }
    }
    const std::size_t n = static_cast<std::size_t>(messages_.grad.numel());
    requests.push_back(comm_.startSend(messages_.up.data() + n, (messages_.up.size() - n) * sizeof(float), 0, kTailTag,
                                       context));
    for (std::size_t request : requests) comm_.wait(request);
  }

 private:
  comm::Communicator& comm_;
  StepMessages& messages_;
  const std::vector<KeyRange> ranges_;
  std::vector<std::unique_ptr<codec::ErrorFeedbackEncoder>> encoders_;  // by range, with a gradient codec
  std::vector<std::string> payloads_;
};

}  // namespace

void work(const roles::RoleArgs& args) {
  const config::TrainConfig& cfg = args.cfg;
  comm::Communicator& comm = args.comm;
  StepMessages messages(models::parameterCount(args.model), bufferCount(args.model), comm.size(), args.device);
  roles::LocalTrainer trainer(cfg, args.model, *args.train, args.device, messages, comm.rank() - cfg.servers,
                              comm.size() - cfg.servers, comm.rank());
  WorkerLink link(args, messages);
  auto receiveWeights = [&](std::int64_t step) {
    const StepHeader header = link.receiveDown(fmt::format("step {}", step));
    trainer.loadWeights();
    return header;
  };
  for (StepHeader header = receiveWeights(0); header.control != Control::Stop;) {
    currentStep() = header.step;
    trainer.computeGradient(header.step, header.step, header.lossScale);
    link.sendUp(fmt::format("step {}", header.step));
    header = receiveWeights(header.step + 1);
  }
}

}  // namespace pstrain::exchanges::sharded
