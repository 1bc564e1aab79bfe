#pragma once
// One server's key range on the K servers' channels (Wire.h): its update (RangeUpdate), the
// workers' gradients of it coming in, and its weights going out. The range servers' exchange
// (sync) takes every worker's gradient each step; the point-to-point exchange (backup,
// async) takes one worker's at a time, as server 0 says.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/codec/Codec.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/MemoryPolicy.h"
#include "runtime/config/RunPlan.h"
#include "runtime/exchanges/Ranges.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/ServerRanges.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::exchanges {

class ServedRange {
 public:
  // Who moves the range's messages: this object's calls below, with the codecs they take
  // (Served), or the exchange its own way (Elsewhere: the rounds' chain; the range is then
  // its update alone, and countTraffic() tells its bytes).
  enum class Messages { Served, Elsewhere };
  // `weights`, `modelShapes`: as RangeUpdate's. `updatesOnArrival`: as RangeUpdate's (sync's updates
  // on arrival).
  ServedRange(comm::Communicator& comm, const config::RunPlan& cfg, KeyRange range, at::Tensor weights,
              const codec::Shapes& modelShapes, bool updatesOnArrival = false, Messages messages = Messages::Served);
  // Server k > 0's: range k of the run's ranges (serverRanges), its weights in memory of its own.
  ServedRange(comm::Communicator& comm, const config::RunPlan& cfg, const models::Net& model, bool updatesOnArrival = false);

  RangeUpdate& update() { return update_; }

  // Starts sending this range of the weights (of update `version`) to the workers `to`
  // (Wire.h; the caller waits): with --compress-weights one frame of this range's codec,
  // coded once a version; else part by part, float32 from where they are, or, to workers
  // that hold bfloat16 ones (--precision bf16-weights), converted into a few staging
  // parts, each reused once its sends are done (those are then done when this returns).
  void startWeightsTo(const std::vector<int>& to, std::int64_t version, std::vector<std::size_t>& requests,
                      const std::string& context);
  // The same, until every send is done (the followers' down message).
  void sendWeightsTo(const std::vector<int>& to, std::int64_t version, const std::string& context);

  // Sync: every worker's gradient of this range, summed in worker order (as one server sums
  // them: the same floats). Raw, part by part from every worker: worker 0's part lands
  // straight in the sum, the others' in a ring of slots (--memory lean: two per worker) that
  // receive while earlier parts are added. Coded, a frame per worker, into two slots
  // likewise. Under --memory fast every message has a slot, all received at once. Updating
  // each part (RangeUpdate::updatesOnArrival), worker 0's part lands in the ring too, and each
  // part's sum is applied by `plan` as soon as the last worker's part is added.
  void receiveGradients(const std::string& context, const StepPlan& plan, std::int64_t step);

  // Point to point: worker rank `worker`'s gradient of this range, which becomes the sum
  // (First), is added to it (Add), or is read and dropped (Drop).
  enum class Use { First, Add, Drop };
  void receiveGradientOf(int worker, Use use, const std::string& context);

  // LeadMessages.h's partialOf, with this server's traffic (per worker, each way) and update seconds.
  Partial partial() { return partialOf(update_, update_.takeUpdateSeconds(), bytesOut_, bytesIn_); }
  // Messages::Elsewhere: the bytes of the last update's messages, each way.
  void countTraffic(double out, double in) { bytesOut_ = out, bytesIn_ = in; }

 private:
  // One message of `rank`'s gradient of this range, `got` bytes at `bytes`: part `part`
  // (raw: its floats, checked for size) or the frame (coded: decoded); its floats.
  const float* valuesOf(const char* bytes, std::size_t got, std::int64_t part, int rank, const std::string& context);

  // At least `count` slots, each a part's or a frame's room (made on first use: sync's
  // servers take two per worker, point to point's two); returns `count`.
  std::size_t useSlots(std::size_t count);
  std::size_t slotBytes() const;  // a slot's: a coded frame's most, or a raw part's (at most the range)

  comm::Communicator& comm_;
  const config::RunPlan& cfg_;
  const config::MemoryPolicy policy_;  // its raw parts' receive slots
  protocol::FloatBuffer ownWeights_;  // server k > 0's
  const KeyRange range_;
  RangeUpdate update_;
  std::unique_ptr<codec::Codec> codec_;        // with a gradient codec: decodes the workers' frames of this range
  std::unique_ptr<codec::Codec> weightCodec_;  // with a weight codec: codes this range of the weights
  std::string weightFrame_;                    // its frame of version frameVersion_
  std::int64_t frameVersion_ = -1;
  std::vector<float> decoded_;
  std::vector<std::vector<char>> slots_;  // where gradients land before they are added: useSlots()
  std::vector<float> partSum_;            // updating each part: the part's sum
  at::Tensor bf16_;                       // --precision bf16-weights: parts staged as the workers hold them
  double bytesOut_ = 0, bytesIn_ = 0;
};

}  // namespace pstrain::exchanges
