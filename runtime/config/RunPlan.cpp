#include "runtime/config/RunPlan.h"

#include <fmt/format.h>

#include <cstdint>

#include "runtime/config/Flags.h"

namespace pstrain::config {

std::string defaultLoss(const std::string& model) { return isModelFile(model) ? "cross-entropy" : "nll"; }

std::string RunPlan::lossFunction() const {
  if (!resolvedLoss.empty()) return resolvedLoss;
  return loss != kAuto ? loss : defaultLoss(model);
}

int RunPlan::virtualShardCount(int workers) const {
  return resolvedShards > 0 ? resolvedShards : virtualShards > 0 ? virtualShards : workers;
}

bool RunPlan::leanMemory() const { return (memoryChosen != MemoryUse::Auto ? memoryChosen : memory) == MemoryUse::Lean; }

TrainConfig RunPlan::explicitFlags() const {
  TrainConfig flags = *this;
  flags.loss = lossFunction();
  if (resolvedShards > 0) flags.virtualShards = resolvedShards;
  return flags;
}

std::string RunPlan::fingerprint() const {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a, 64 bit
  for (const auto& [key, value] : fingerprintFields(explicitFlags())) {
    for (char c : key + "=" + value + "\n") {
      hash ^= static_cast<unsigned char>(c);
      hash *= 1099511628211ull;
    }
  }
  return fmt::format("{:016x}", hash);
}

}  // namespace pstrain::config
