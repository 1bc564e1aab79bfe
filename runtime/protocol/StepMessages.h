#pragma once
// The two messages of a synchronous step, laid out as StepProtocol.h describes, with
// tensor views of their parts. The server and every worker hold one each.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "runtime/protocol/StepProtocol.h"

namespace pstrain::protocol {

// A zeroed float array whose memory belongs to a tensor: the views cut from it (a model's
// parameters) keep it alive after the FloatBuffer is gone, so no copy is needed to hand
// them over. Its pages take memory only once written, unless `pinned`: then it is page-locked
// memory that a CUDA device copies from and to at full speed, and without blocking the host
// (needs a CUDA build of libtorch). Iterates like a std::vector<float>.
class FloatBuffer {
 public:
  explicit FloatBuffer(std::size_t size, bool pinned = false);
  float* data() const { return data_; }
  std::size_t size() const { return size_; }
  float* begin() const { return data_; }
  float* end() const { return data_ + size_; }
  float& operator[](std::size_t i) const { return data_[i]; }
  // Floats [offset, offset + count) as a 1-D tensor view.
  at::Tensor view(std::int64_t offset, std::int64_t count) const;
  // Gives the whole pages of floats [offset, offset + count) back (portable::releasePages):
  // they take no memory until written again, and read as anything until then. Pinned
  // memory keeps its pages (the device copies from and into them).
  void release(std::int64_t offset, std::int64_t count) const;

 private:
  at::Tensor tensor_;
  float* data_;
  std::size_t size_;
  bool pinned_;
};

struct StepMessages {
  // `ranks`: the size of the world, which sizes the trailer. `device`: where this rank
  // computes; on a CUDA device the messages are pinned host memory. `bf16Weights`: the
  // weights as bfloat16 (a worker's with --precision bf16-weights), else float32.
  StepMessages(std::int64_t parameters, std::int64_t buffers, int ranks, c10::Device device = c10::kCPU,
               bool bf16Weights = false);
  StepMessages(const StepMessages&) = delete;  // the views point into the vectors
  StepMessages& operator=(const StepMessages&) = delete;

  FloatBuffer down;         // header, weights, buffers, shares
  FloatBuffer up;           // gradient, buffers, trailer
  at::Tensor weights;       // views into down (they keep its memory alive): float32 or bfloat16
  at::Tensor serverBuffers;
  at::Tensor shares;        // sync: the virtual shards each rank computes this step (one float per rank)
  at::Tensor downTail;      // serverBuffers and shares, contiguous: what follows the weights
  at::Tensor grad;          // views into up
  at::Tensor workerBuffers;
  float* trailer;           // trailerFloats(ranks) floats at the end of up
  const int ranks;

  void setHeader(const StepHeader& header);
  StepHeader header() const { return parseStepHeader(down.data(), down.size() * sizeof(float)); }
  std::size_t downBytes() const { return down.size() * sizeof(float); }
  std::size_t upBytes() const { return up.size() * sizeof(float); }
  // The up message after the gradient: the buffers, then the trailer.
  float* tail() const { return up.data() + grad.numel(); }
  std::size_t tailFloats() const { return up.size() - static_cast<std::size_t>(grad.numel()); }
};

}  // namespace pstrain::protocol
