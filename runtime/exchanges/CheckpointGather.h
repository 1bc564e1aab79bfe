#pragma once
// A checkpoint's weights and optimizer state gathered on server 0 from every server's range
// (--servers K), a chunk at a time, as the Publisher writes them.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Communicator.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/Ranges.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/Parts.h"

namespace pstrain::exchanges {

// A checkpoint, on server 0: the model's weights and the optimizer state come from every
// server 4 MiB at a time, as the Publisher writes them (the trained TorchScript module too),
// so that server 0 never holds more of either than its own range and one chunk. The model's
// floats outside range 0 and `whole` (the Publisher's optimizer) are placeholders: buffers of
// the whole model's size that nothing writes (pages untouched or given back take no memory;
// read, they are zeros), whose bytes recordSource() gives.
class CheckpointGather {
 public:
  // `own`: range 0's update.
  CheckpointGather(comm::Communicator& comm, std::vector<KeyRange> ranges, optim::Optimizer& whole, RangeUpdate& own);
  // The checkpoint of the step just updated: `model` (the whole model's flat floats, which
  // the Publisher's model views; range 0 real) and the placeholders into `whole`; the servers
  // then answer recordSource() until release(). Release after the
  // Publisher's record() of the step, or after its finish() at the end.
  void gather(float* model, const std::string& context);
  // checkpoint::RecordSource: a placeholder's bytes (weights or state), from range 0's and,
  // a chunk at a time, the servers'; false for memory within range 0 of the model, which
  // holds its own, and for memory that is neither.
  bool recordSource(const void* data, std::size_t bytes, const checkpoint::RecordWrite& write);
  // After the Publisher wrote what it reads (a no-op when nothing was gathered): the servers go on.
  void release();

 private:
  // Floats [begin, end) of `k`'s range of state `state` (kWeights: the model) into `out`.
  void request(std::size_t k, std::int64_t state, std::int64_t begin, std::int64_t end, float* out);

  comm::Communicator& comm_;
  const std::vector<KeyRange> ranges_;
  optim::Optimizer& whole_;
  RangeUpdate& own_;
  float* model_ = nullptr;                // the last gather()'s
  std::vector<at::Tensor> placeholders_;  // by state, of the whole model's size
  static constexpr std::int64_t kChunkFloats = kPartFloats;  // a request
  std::vector<float> chunk_;              // recordSource()'s, while serving
  bool serving_ = false;
};
// Server k at a checkpoint: tells server 0 its optimizer state's names, then, once its next
// down message is sent (the workers compute meanwhile), serves server 0's requests for its
// range of `weights` (the model as the workers hold it) and of the state until released.
void offerCheckpoint(comm::Communicator& comm, const RangeUpdate& update, const std::string& context);
void serveCheckpoint(comm::Communicator& comm, const float* weights, RangeUpdate& update, const std::string& context);

}  // namespace pstrain::exchanges
