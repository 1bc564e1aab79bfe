#include "runtime/protocol/StepMessages.h"

#include <torch/torch.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace pstrain::protocol {

FloatBuffer::FloatBuffer(std::size_t size, bool pinned) : size_(size) {
  if (pinned) {
    tensor_ = torch::zeros({static_cast<std::int64_t>(size)}, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(true));
    data_ = tensor_.data_ptr<float>();
    return;
  }
  // Fresh anonymous pages read as zeros and take memory only once written: the server
  // never writes the gradient part of its up message, so that costs it nothing.
  const std::size_t bytes = std::max<std::size_t>(size, 1) * sizeof(float);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  tensor_ = torch::from_blob(base, {static_cast<std::int64_t>(size)}, [bytes](void* p) { ::munmap(p, bytes); },
                             torch::kFloat32);
  data_ = static_cast<float*>(base);
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
