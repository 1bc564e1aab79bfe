#include "runtime/protocol/StepMessages.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "runtime/Portable.h"

namespace pstrain::protocol {

FloatBuffer::FloatBuffer(std::size_t size, bool pinned) : size_(size), pinned_(pinned) {
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

void FloatBuffer::release(std::int64_t offset, std::int64_t count) const {
  if (!pinned_) portable::releasePages(data_ + offset, static_cast<std::size_t>(count) * sizeof(float));
}

StepMessages::StepMessages(std::int64_t n, std::int64_t m, int ranks, c10::Device device, bool bf16Weights)
    : down(protocol::downBytes(static_cast<std::size_t>(n), static_cast<std::size_t>(m), ranks, bf16Weights) / sizeof(float),
           device.is_cuda()),
      up(n + m + trailerFloats(ranks), device.is_cuda()),
      ranks(ranks) {
  const auto w = static_cast<std::int64_t>(weightFloats(static_cast<std::size_t>(n), bf16Weights));
  weights = bf16Weights ? down.view(kHeaderFloats, w).view(at::kBFloat16).narrow(0, 0, n) : down.view(kHeaderFloats, n);
  serverBuffers = down.view(kHeaderFloats + w, m);
  shares = down.view(kHeaderFloats + w + m, ranks);
  downTail = down.view(kHeaderFloats + w, m + ranks);
  grad = up.view(0, n);
  workerBuffers = up.view(n, m);
  trailer = up.data() + n + m;
}

void StepMessages::setHeader(const StepHeader& header) { std::memcpy(down.data(), &header, sizeof header); }

}  // namespace pstrain::protocol
