#include "runtime/exchanges/Memory.h"

#include "runtime/codec/Codec.h"
#include "runtime/config/Codecs.h"
#include "runtime/config/Optimizers.h"

namespace pstrain::exchanges {

double stateBytes(const config::TrainConfig& rule) {
  const config::OptimizerInfo& info = config::optimizerInfo(rule.optimizer);
  if (info.momentum && rule.momentum == 0) return 0;
  return 4.0 * static_cast<double>(info.state.size());
}

double residualBytes(const config::TrainConfig& cfg) {
  if (!cfg.compressesGradients()) return 0;
  const std::string spec = cfg.gradientCodec();
  return config::errorFeedbackOn(cfg.errorFeedback, spec) ? codec::residualBytes(spec) : 0;
}

void addGradientBuffer(Memory& m, const config::RunPlan& cfg, bool streams) {
  if (!streams) {  // the whole gradient, written by the measured step too
    m.held += 4;
  } else if (!config::MemoryPolicy(cfg).givesPagesBack()) {
    m.held += 4;
    m.keptGradient = 4;
  }
}

double weightBytes(const config::TrainConfig& cfg) { return cfg.bf16Weights() ? 2 : 4; }

double decodingBytes(const config::TrainConfig& cfg) {
  return cfg.compressesGradients() ? 4 + 2 * codec::frameBytes(cfg.gradientCodec()) : 0;
}

}  // namespace pstrain::exchanges
