#include "runtime/metrics/Progress.h"

#include <fmt/format.h>

#include <cmath>

namespace pstrain::metrics {

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto total = static_cast<std::int64_t>(std::llround(seconds));
  std::int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, s) : fmt::format("{}:{:02}", m, s);
}

std::string progressLine(const StepProgress& p) {
  double fraction = p.total > 0 ? static_cast<double>(p.step) / p.total : 0;
  const std::int64_t done = p.step - p.firstStep;
  double eta = done > 0 ? p.elapsedSeconds / done * (p.total - p.step) : -1;
  int width = static_cast<int>(std::to_string(p.total).size());
  const bool tokens = p.tokensPerSample > 0;
  return fmt::format("step {:>{}}/{} ({:5.1f}%) | epoch {} | loss {:.4f} | lr {:.4g} | {:.0f} {}/s | ETA {}",
                     p.step, width, p.total, 100 * fraction, p.epoch, p.loss, p.lr,
                     p.samplesPerSecond * static_cast<double>(tokens ? p.tokensPerSample : 1),
                     tokens ? "tokens" : "samples", formatDuration(eta));
}

}  // namespace pstrain::metrics
