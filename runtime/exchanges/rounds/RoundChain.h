#pragma once
// How the two messages of a diloco round travel: along a chain of the ranks, a chunk at a
// time. Up, the workers' summed pseudo-gradient: the last worker sends its chunks to the one
// before it, which adds its own to each chunk as it arrives and passes the sum on, ...,
// worker 1 to rank 0. Down, the server's message: rank 0 to worker 1, which passes each
// chunk on to worker 2 as it arrives, and so on. So every link carries one message's bytes
// each way whatever the number of workers (a gather, or a tree rooted at rank 0, makes rank
// 0's link carry N), and a chunk moves on while the next one travels.
//
// With K servers (--servers), server k owns a contiguous range of the weights and the chunks
// that cut it: the first worker sends each chunk up to its owner, and takes each chunk of the
// down message from it; the fixed parts travel to and from server 0. Every other hop is as
// with one server.
//
// Each hop encodes its up chunk with the up codec, under its own error feedback where that
// is on. Down, the server sends either the weights whole (the first round, and with a
// lossless down codec: raw floats or zlib) or, with a lossy down codec, the update that
// moves the workers' copy of the weights toward its own: encoded, and applied by the server
// to its copy exactly as every worker applies it to theirs (decoded, then added), so that
// all copies stay equal bit for bit and what the coding left out is sent with the next
// round's update (error feedback by construction). Under a lossy down codec every copy
// holds its weights rounded to bfloat16 (roundedUpdate): a worker keeps its copy in 2 bytes
// a weight, not 4, and the rounding is far below what the codec leaves out of an update.
// The rounds start from that copy, so that each pseudo-gradient measures a round's progress
// exactly; the server's own weights, which the outer step moves, stay float32.
//
// Nothing blocks but finish(): a worker calls advance() between its local steps, so that a
// round's exchange can travel while it trains on. One exchange at a time per rank.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/codec/Codec.h"
#include "runtime/comm/Communicator.h"

namespace pstrain::exchanges::rounds {

// A worker's copy of the global weights: float32, or under a lossy down codec (sendsUpdates)
// bfloat16's bits.
struct GlobalCopy {
  float* f32 = nullptr;
  std::uint16_t* bf16 = nullptr;
};

// A weight of a copy plus its decoded update, as every copy holds it under a lossy down
// codec: rounded to the nearest bfloat16 (ties to even), the same on every rank.
float roundedUpdate(float weight, float update);
// The servers' copy of the weights made from their own `n` weights at `weights` (in place):
// each rounded to bfloat16, as every worker holds them under a lossy down codec.
void roundToCopy(float* weights, std::int64_t n);

class RoundChain {
 public:
  struct Codecs {
    std::string up = "none", down = "none";  // codec specs (codec/Codec.h)
    bool upErrorFeedback = false;
  };
  // `serverEnds`: where each server's range of the model's parameter floats ends (server k
  // owns [serverEnds[k-1], serverEnds[k]); ranks 0..K-1 are the servers, the others the
  // workers); `upFixed`, `downFixed`: the raw floats that follow the weights in each message
  // (buffers and trailer; header, buffers and shares). `seed` seeds this rank's encoders.
  // Not collective.
  RoundChain(comm::Communicator& comm, const std::vector<std::int64_t>& serverEnds, std::int64_t upFixed,
             std::int64_t downFixed, const Codecs& codecs, std::uint64_t seed);
  ~RoundChain();

  // Whether the down message sends updates (a lossy down codec) rather than whole weights.
  bool sendsUpdates() const;
  // A worker: multiplies what error feedback keeps for its next up message by `factor`
  // (the next pseudo-gradient is weighted by `factor` times the last one's samples).
  void scaleUpResidual(double factor);
  // A worker: gives the memory of what error feedback keeps back for its next up message
  // (codec::ErrorFeedbackEncoder::dropResidual), dropping it.
  void dropUpResidual();

  // A worker starts a round's exchange: `delta` (weights floats) and `fixed` (upFixed
  // floats) go up, summed with those of the workers after it; the down message comes into
  // `global` (weights values, float32 or under a lossy down codec bfloat16: replaced, or
  // moved by the server's update) and `downFixed`. All four are the caller's and left alone
  // until the exchange is done. With `delta` null nothing goes up (the run's first down
  // message). The down message holds the weights whole in the first exchange and with a
  // lossless down codec, else the update (the servers' startServerDown keeps to this): the
  // worker takes in no more than that. `weightsHeld` (the first exchange only): the worker's
  // copy holds the servers' copy already (config::RunPlan::workersHoldWeights), and the
  // first down message is its fixed part alone.
  void startWorker(const float* delta, const float* fixed, GlobalCopy global, float* downFixed, const std::string& context,
                   bool weightsHeld = false);
  // A server starts receiving the sum of the workers' up messages into `delta` (its range's
  // floats) and (server 0) `fixed` (overwritten).
  void startServerUp(float* delta, float* fixed, const std::string& context);
  // A server sends `fixed` (server 0: downFixed floats; the others': unused), then `weights`
  // (its range's floats) whole (`target` null) or the update that moves them toward `target`
  // (as many), which it applies to `weights` here (roundedUpdate: `weights` is a copy made by
  // roundToCopy); `weights` null: none (the first message, where the workers hold them
  // already: startWorker's `weightsHeld`). The buffers are left alone until the exchange is
  // done; every server sends updates, or none does.
  void startServerDown(const float* fixed, float* weights, const float* target, const std::string& context);

  // Moves on what arrived (sums, relays, decodes) without waiting; whether this rank's part
  // of the started exchange is done (a worker's: its up message passed on and the whole
  // down message in and passed on; the server's: the one it started).
  bool advance();
  // A worker: whether the whole down message is in (it may still be passing it on).
  bool downArrived() const;
  // advance() until done, each wait bounded by the communicator's timeout.
  void finish();

  // What this rank's link carried since the last call: bytes sent and received, as they
  // travelled and unencoded (the same messages as raw floats), and seconds spent coding.
  struct Traffic {
    double sent = 0, received = 0, rawSent = 0, rawReceived = 0, codecSeconds = 0;
  };
  Traffic take();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstrain::exchanges::rounds
