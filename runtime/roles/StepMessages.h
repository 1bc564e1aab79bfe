#pragma once
// The two messages of a synchronous step, laid out as StepProtocol.h describes, with
// tensor views of their parts. The server and every worker hold one each.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "runtime/roles/StepProtocol.h"

namespace pstrain::roles {

struct StepMessages {
  StepMessages(std::int64_t parameters, std::int64_t buffers);
  StepMessages(const StepMessages&) = delete;  // the views point into the vectors
  StepMessages& operator=(const StepMessages&) = delete;

  std::vector<float> down;  // header, weights, buffers
  std::vector<float> up;    // gradient, buffers, trailer
  at::Tensor weights;       // views into down
  at::Tensor serverBuffers;
  at::Tensor grad;          // views into up
  at::Tensor workerBuffers;
  float* trailer;           // kTrailerFloats floats at the end of up

  void setHeader(const StepHeader& header);
  StepHeader header() const { return parseStepHeader(down.data(), down.size() * sizeof(float)); }
  std::size_t downBytes() const { return down.size() * sizeof(float); }
  std::size_t upBytes() const { return up.size() * sizeof(float); }
};

}  // namespace pstrain::roles
