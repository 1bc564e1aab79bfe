#include "runtime/roles/StepMessages.h"

#include <torch/torch.h>

#include <cstring>

namespace pstrain::roles {

StepMessages::StepMessages(std::int64_t n, std::int64_t m)
    : down(kHeaderFloats + n + m), up(n + m + kTrailerFloats) {
  weights = torch::from_blob(down.data() + kHeaderFloats, {n}, torch::kFloat32);
  serverBuffers = torch::from_blob(down.data() + kHeaderFloats + n, {m}, torch::kFloat32);
  grad = torch::from_blob(up.data(), {n}, torch::kFloat32);
  workerBuffers = torch::from_blob(up.data() + n, {m}, torch::kFloat32);
  trailer = up.data() + n + m;
}

void StepMessages::setHeader(const StepHeader& header) { std::memcpy(down.data(), &header, sizeof header); }

}  // namespace pstrain::roles
