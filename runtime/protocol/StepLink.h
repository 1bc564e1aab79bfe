#pragma once
// How the two step messages travel between ranks, in one place for every mode: each
// exchange written once over the frame layer (Frames.h), raw floats straight from and into
// StepMessages (no copies; sums done by MPI) or codec payloads (sums then made by the
// receiver).
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/Registry.h"
#include "runtime/codec/Codec.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/MemoryPolicy.h"
#include "runtime/config/RunPlan.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/Frames.h"
#include "runtime/protocol/StepMessages.h"

namespace pstrain::protocol {

class StepLink {
 public:
  // `messages` belongs to the caller and must outlive the link. `seed` seeds this rank's
  // encoder (randomk's choices, powersgd's first Q).
  StepLink(comm::Communicator& comm, const config::RunPlan& cfg, const models::Net& model,
           StepMessages& messages, std::uint64_t seed);

  // Sync: messages.down from rank 0 to every rank.
  void broadcastDown(const std::string& context);
  // Sync: the sum of the workers' messages.up into rank 0's messages.up (overwritten).
  void reduceUp(const std::string& context);
  // Sync with overlap (raw messages only): the up message goes in gradient buckets while
  // backward runs, and the next down message comes back bucket by bucket as the server
  // updates them. Both sides start their collectives in one order: every bucket's
  // reduction, the rest of the up message, every bucket's weights, the buffers, the header.
  // Worker: startBucket() starts the reduction of messages.grad's range `bucket` (from
  // inside backward, in bucket order). Under --memory lean it first waits for the oldest
  // while more than a few MiB are out, each of whose pages then goes back (the worker holds
  // the gradient buckets in flight, never a whole gradient); under fast every bucket goes
  // out at once and the gradient's pages stay for the next step; after backward, finishStep() sends the rest
  // up, receives the whole next down message into messages.down and waits for all of it.
  void startBucket(const Bucket& bucket, const std::string& context);
  void finishStep(const std::string& context);
  // Server: calls `reduced(bucket, grad)` in order as soon as each bucket is summed (it
  // updates that bucket's weights, which then start down) and returns once the whole up
  // message is in. `grad` is the bucket's summed gradient, valid during the call only: it
  // lies in a ring of a few bucket-sized slots, not in messages.grad, which the server
  // never touches (a model size less of rank 0's memory). The rest of the up message lands
  // in messages.up. Then, with the header and buffers set, finishDown() sends them and
  // waits until the whole down message is out.
  void reduceUpInBuckets(const std::vector<Bucket>& buckets,
                         const std::function<void(const Bucket&, at::Tensor& grad)>& reduced,
                         const std::string& context);
  void finishDown(const std::string& context);
  // Sync with gradients streamed but updates after the whole gradient (streamsGradients()
  // without updatesOnArrival()): the worker's startBucket() calls as above, then finishUp() sends
  // the rest of the up message; the server's reduceUpBuckets() sums every bucket and the
  // rest into its messages.up, as reduceUp() would. The down message then goes whole.
  void finishUp(const std::string& context);
  void reduceUpBuckets(const std::vector<Bucket>& buckets, const std::string& context);

  // diloco with --overlap-rounds (raw messages only): a worker starts a round's exchange,
  // the sum-reduce of messages.up and the broadcast of the next messages.down, and finishes
  // it a round later (calling Communicator::progress() while it computes); it leaves both
  // messages alone in between. Collective with the server's reduceUp() then broadcastDown().
  void startRoundExchange(const std::string& context);
  void finishRoundExchange(const std::string& context);

  // Allreduce: the sum of every rank's messages.up into every rank's messages.up.
  void allReduceUp(const std::string& context);

  // This rank's accounting since the last take(): bytes of one message each way as sent
  // and unencoded, and seconds spent encoding and decoding.
  struct Traffic {
    double bytesDown = 0, rawBytesDown = 0, bytesUp = 0, rawBytesUp = 0, codecSeconds = 0;
  };
  Traffic take();

 private:
  void countUp(double bytes);  // one up message as sent
  void countDown(double bytes);
  void startWeightsDown(const Bucket& bucket, const std::string& context);
  void startDownTail(const std::string& context);  // the buffers, then the header
  void waitStarted();
  void finishOldestBucket();  // worker: the oldest bucket's reduction, and its pages

  comm::Communicator& comm_;
  StepMessages& messages_;
  std::unique_ptr<UpFrame> up_;
  std::unique_ptr<DownFrame> down_;
  Traffic traffic_;
  std::unique_ptr<FloatBuffer> ring_;   // server: where the buckets are summed (reduceUpInBuckets)
  std::unique_ptr<FloatBuffer> bf16Wire_;  // server, to workers with bfloat16 weights: their buckets, staged
  std::vector<Bucket> buckets_;         // this step's buckets, in order
  std::vector<std::size_t> started_;   // requests of this step not waited for yet
  std::deque<std::pair<std::size_t, Bucket>> inFlight_;  // worker: bucket reductions out, oldest first
  const config::MemoryPolicy policy_;  // the buckets out at once; lean gives their pages (and the staged bf16 ones) back
  Bytes roundInbox_;                    // where startRoundExchange() receives the down message
};

}  // namespace pstrain::protocol
