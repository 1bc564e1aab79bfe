#include "runtime/protocol/StepMessages.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "runtime/Portable.h"

namespace pstrain::protocol {

FloatBuffer::FloatBuffer(std::size_t size, bool pinned) : size_(size) {
  if (pinned) {
    tensor_ = torch::zeros({static_cast<std::int64_t>(size)}, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(true));
    data_ = tensor_.data_ptr<float>();
    return;
  }
  // Fresh pages read as zeros and take memory only once written: the server never writes
  // the gradient part of its up message, so that costs it nothing.
  auto pages = std::make_shared<portable::FreshPages>(size * sizeof(float));
  data_ = reinterpret_cast<float*>(pages->data());
  tensor_ = torch::from_blob(data_, {static_cast<std::int64_t>(size)}, [pages](void*) {}, torch::kFloat32);
}

at::Tensor FloatBuffer::view(std::int64_t offset, std::int64_t count) const { return tensor_.narrow(0, offset, count); }

StepMessages::StepMessages(std::int64_t n, std::int64_t m, int ranks, c10::Device device)
    : down(kHeaderFloats + n + m + ranks, device.is_cuda()),
      up(n + m + trailerFloats(ranks), device.is_cuda()),
      ranks(ranks) {
  weights = down.view(kHeaderFloats, n);
  serverBuffers = down.view(kHeaderFloats + n, m);
  shares = down.view(kHeaderFloats + n + m, ranks);
  downTail = down.view(kHeaderFloats + n, m + ranks);
  grad = up.view(0, n);
  workerBuffers = up.view(n, m);
  trailer = up.data() + n + m;
}

void StepMessages::setHeader(const StepHeader& header) { std::memcpy(down.data(), &header, sizeof header); }

}  // namespace pstrain::protocol
