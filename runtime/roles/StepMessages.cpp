#include "runtime/roles/StepMessages.h"

#include <torch/torch.h>

#include <cstring>

namespace pstrain::roles {

FloatBuffer::FloatBuffer(std::size_t size)
    : tensor_(torch::zeros({static_cast<std::int64_t>(size)}, torch::kFloat32)),
      data_(tensor_.data_ptr<float>()),
      size_(size) {}

at::Tensor FloatBuffer::view(std::int64_t offset, std::int64_t count) const { return tensor_.narrow(0, offset, count); }

StepMessages::StepMessages(std::int64_t n, std::int64_t m, int ranks)
    : down(kHeaderFloats + n + m), up(n + m + trailerFloats(ranks)), ranks(ranks) {
  weights = down.view(kHeaderFloats, n);
  serverBuffers = down.view(kHeaderFloats + n, m);
  grad = up.view(0, n);
  workerBuffers = up.view(n, m);
  trailer = up.data() + n + m;
}

void StepMessages::setHeader(const StepHeader& header) { std::memcpy(down.data(), &header, sizeof header); }

}  // namespace pstrain::roles
