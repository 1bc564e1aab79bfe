#include "runtime/exchanges/ServerZero.h"

#include <torch/torch.h>

#include <utility>

#include "runtime/Portable.h"
#include "runtime/exchanges/Wire.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/SummedStep.h"

namespace pstrain::exchanges {

ServerZero::ServerZero(roles::Server& s, std::vector<KeyRange> ranges, ServedRange::Messages messages,
                       bool updatesOnArrival)
    : s_(s),
      ranges_(std::move(ranges)),
      keepsWholeWeights_(messages == ServedRange::Messages::Elsewhere),
      own_(s.comm, s.cfg, ranges_[0], s.messages.weights.narrow(0, ranges_[0].begin, ranges_[0].size()),
           protocol::parameterShapes(s.model), updatesOnArrival, messages),
      partials_(ranges_.size()),
      gather_(s.comm, ranges_, s.optimizer, own_.update()) {
  s.publisher->setRecordSource([this](const void* data, std::size_t bytes, const checkpoint::RecordWrite& write) {
    return gather_.recordSource(data, bytes, write);
  });
}

void ServerZero::start(const Start& start) {
  sendStarts(s_.comm, ranges_, start, s_.messages.weights, s_.optimizer, own_.update().optimizer());
  if (!start.train || keepsWholeWeights_) return;
  float* weights = s_.messages.weights.data_ptr<float>();
  portable::releasePages(weights + ranges_[0].end,
                         static_cast<std::size_t>(ranges_.back().end - ranges_[0].end) * sizeof(float));
}

void ServerZero::sendDown(const std::vector<int>& to, std::int64_t version, const std::string& context) {
  std::vector<std::size_t> requests;
  own_.startWeightsTo(to, version, requests, context);
  const protocol::StepMessages& m = s_.messages;
  const std::size_t tailBytes = static_cast<std::size_t>(m.downTail.numel()) * sizeof(float);
  for (int w : to) {
    requests.push_back(s_.comm.startSend(m.down.data(), sizeof(protocol::StepHeader), w, kHeadTag, context));
    requests.push_back(s_.comm.startSend(m.downTail.data_ptr<float>(), tailBytes, w, kHeadTag, context));
  }
  for (std::size_t request : requests) s_.comm.wait(request);
}

Verdict ServerZero::decide(std::int64_t step, const Verdict& proposed, double& gradNorm) {
  partials_[0] = own_.partial();
  return exchanges::decide(s_.comm, s_.admission, s_.messages.trailer, partials_, step, proposed, gradNorm);
}

void ServerZero::apply(const Verdict& v, std::int64_t step, int contributors) {
  applyVerdict(own_.update(), v, step, 0);
  if (v.apply) roles::averageBuffers(s_.messages, s_.model, contributors);
}

void ServerZero::gather(const std::string& context) { gather(s_.messages.weights.data_ptr<float>(), context); }

void ServerZero::gather(float* model, const std::string& context) { gather_.gather(model, context); }

}  // namespace pstrain::exchanges
