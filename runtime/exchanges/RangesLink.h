#pragma once
// A worker's messages on the K servers' channels (Wire.h), range by range: the weights down
// from every server (decoded, with a weight codec) and the header and the rest from server
// 0; its gradient up, each range to its server (raw parts or a frame of the range's own
// codec, with error feedback of its own), and its buffers and trailer (the tail) to server 0.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/Registry.h"
#include "runtime/codec/Codec.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/MemoryPolicy.h"
#include "runtime/config/RunPlan.h"
#include "runtime/exchanges/Ranges.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/protocol/StepProtocol.h"

namespace pstrain::exchanges {

class RangesLink {
 public:
  // How the tail travels (Wire.h): after the gradient on its own channel (sync, whose server
  // 0 takes every worker's), or first on the blocking channel (point to point, whose server 0
  // takes whichever worker's comes first and then that worker's gradient).
  enum class Tail { After, First };

  // `messages`: this worker's (its weights receive the ranges in place).
  RangesLink(comm::Communicator& comm, const config::RunPlan& cfg, const models::Net& model,
             protocol::StepMessages& messages, Tail tail);

  // Every range of the weights from its server, and the header and the rest from server 0.
  protocol::StepHeader receiveDown(const std::string& context);

  // The gradient's parts as raw gradients travel (Wire.h), in the order backward makes them:
  // from the flat gradient's end, every range's last part first.
  const std::vector<protocol::Bucket>& parts() const { return parts_; }

  // Streaming, raw (Tail::After): starts sending the gradient's part `part` to its server
  // (from inside backward). Under --memory lean it first waits for the oldest while more
  // than a few are out, whose pages then go back: the worker holds the parts in flight,
  // never a whole gradient. Under fast every part goes out at once, to every server in
  // parallel, and the pages stay for the next step. finishUp() after backward: the parts
  // still out, then the tail.
  void startPart(const protocol::Bucket& part, const std::string& context);
  void finishUp(const std::string& context);

  // The whole gradient at once (not streamed): coded, every range a frame of its own codec;
  // raw, its parts(); and the tail, first or after as constructed.
  void sendUp(const std::string& context);

  bool coded() const { return !encoders_.empty(); }

 private:
  // With a weight codec: one frame of each range, decoded into the weights once all are in.
  protocol::StepHeader receiveCodedDown(const std::string& context);
  // The header, buffers and shares from server 0 beside the weights' `requests`; once all are
  // in, `weightsIn` checks (and decodes) the weights.
  template <typename WeightsIn>
  protocol::StepHeader finishDown(std::vector<std::size_t>& requests, WeightsIn weightsIn, const std::string& context);
  // The trailer's codec seconds (encoding the gradient, decoding the weights), then the
  // tail to server 0.
  void sendTail(const std::string& context);
  void finishOldestPart();

  comm::Communicator& comm_;
  protocol::StepMessages& messages_;
  const Tail tail_;
  const std::vector<KeyRange> ranges_;
  std::vector<protocol::Bucket> parts_;
  std::vector<std::unique_ptr<codec::ErrorFeedbackEncoder>> encoders_;  // by range, with a gradient codec
  std::vector<std::string> payloads_;
  std::deque<std::pair<std::size_t, protocol::Bucket>> inFlight_;  // raw: parts out, oldest first
  std::vector<std::unique_ptr<codec::Codec>> weightDecoders_;      // by range, with a weight codec
  std::vector<std::vector<char>> weightFrames_;                    // by range: its frame's room
  double codecSeconds_ = 0;  // since the last trailer
  const config::MemoryPolicy policy_;  // the parts out at once; lean gives their pages back
};

}  // namespace pstrain::exchanges
