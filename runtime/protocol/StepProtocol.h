#pragma once
// The wire layout of one synchronous step (DESIGN.md, "The step protocol").
//
// Down (rank 0 -> all, one broadcast): a 32-byte StepHeader, the flat weights (float32, or
// bfloat16 padded to a whole float with --precision bf16-weights: what the workers hold,
// the server converting its float32 master weights as it sends them), then the model's
// buffers (BatchNorm running statistics) as averaged by the server, then one float per
// rank: how many of the step's virtual shards it computes (sync; --balance sets them).
// Up (all -> rank 0, one sum-reduce): the flat gradient, each worker's multiplied by its
// sample count; the worker's buffers after its forward pass; then trailerFloats(ranks)
// floats of per-step accounting. The server's own contribution is all zeros, so after the
// reduce the gradient divided by the summed sample count is the gradient of the mean loss
// over every sample of the step, whatever the workers' batch sizes, and the buffers
// divided by the number of workers are their average.
//
// With --overlap (sync, raw messages) the same bytes travel in pieces, in this order on
// every rank: the gradient's buckets (each reduced while backward runs), the rest of the up
// message, then the next down message's weights bucket by bucket (each broadcast as soon
// as the server has updated it), its buffers, its header (StepLink).
//
// The backup and async modes send the same two messages point to point (a worker pushes its
// up message, the server answers with a down message), the allreduce mode sums the up
// message over every rank. The trailer's kVersion says which weights a gradient was
// computed on (the step of the down message; exact in a float up to 2^24 steps).
#include <cstddef>
#include <cstdint>

namespace pstrain::protocol {

enum class Control : std::int32_t {
  Train = 0,  // compute a gradient for `step` on the weights that follow
  Stop = 1,   // training is over: leave the loop
  Retry = 2,  // async: your gradient was too stale; compute the same batch again on these weights
};

struct StepHeader {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  Control control = Control::Train;
  float lr = 0;
  float lossScale = 1;  // what the workers multiply the loss by before backward (--loss-scale; 1: none)
  std::int32_t reserved = 0;
};
static_assert(sizeof(StepHeader) == 32, "the header is part of the wire format");

constexpr std::size_t kHeaderFloats = sizeof(StepHeader) / sizeof(float);

// Positions in the trailer, after the gradient and the buffers of the up message.
enum Trailer : std::size_t {
  kLossSum = 0,          // sum over samples of the loss
  kSamples = 1,          // samples in the batch
  kNonFinite = 2,        // 1 if the worker saw a non-finite loss or gradient
  kDataWaitSeconds = 3,  // time the step waited for its batch
  kVersion = 4,          // step of the weights the gradient was computed on
  kStopRequest = 5,      // allreduce: rank 0 sets 1 to end the run after this step (--max-seconds)
  kCodecSeconds = 6,     // encoding the gradient and decoding the weights (--compress*)
  // Then one float per rank of the world: rank r's batch time (data wait + forward +
  // backward) at kComputeSeconds + r, the others 0. A sum keeps every rank's own, so the
  // server knows the slowest worker of a step, not only the mean.
  kComputeSeconds = 7,
};

constexpr std::size_t trailerFloats(int ranks) { return kComputeSeconds + static_cast<std::size_t>(ranks); }

// The largest step whose number a float trailer holds exactly.
constexpr std::int64_t kMaxVersionedSteps = std::int64_t(1) << 24;

// The step number of a trailer's kVersion from `rank`; throws CommError unless it is a whole
// number in [0, kMaxVersionedSteps] (a NaN or a huge float must not become an integer).
std::int64_t trailerVersion(float value, int rank);

// Whether a sample count summed in floats is `expected`: floats hold counts exactly only up
// to 2^24, so a relative tolerance beyond that.
bool sameCount(double sent, double expected);

// Reads the header at the front of a down message; throws CommError unless it is one the
// server can have sent (known control, non-negative step and epoch).
StepHeader parseStepHeader(const void* bytes, std::size_t size);

// The floats that the weights of `parameters` parameters take in a down message: one each,
// or, as bfloat16 (--precision bf16-weights), one per two.
constexpr std::size_t weightFloats(std::size_t parameters, bool bf16) { return bf16 ? (parameters + 1) / 2 : parameters; }

// Bytes of the down and up messages of one step for a model of `parameters` parameter
// and `buffers` buffer elements, in a world of `ranks` processes.
constexpr std::size_t downBytes(std::size_t parameters, std::size_t buffers, int ranks, bool bf16 = false) {
  return (kHeaderFloats + weightFloats(parameters, bf16) + buffers + static_cast<std::size_t>(ranks)) * sizeof(float);
}
constexpr std::size_t upBytes(std::size_t parameters, std::size_t buffers, int ranks) {
  return (parameters + buffers + trailerFloats(ranks)) * sizeof(float);
}

}  // namespace pstrain::protocol
