#include "runtime/exchanges/Cost.h"

#include <algorithm>

namespace pstrain::exchanges {

Links linksOf(const ProbeMeasurements& m, int n) {
  Links l;
  l.slowestBandwidth = m.bytesPerSecond[0];
  for (int i = 0; i < n; ++i) {
    l.worstLatency = std::max(l.worstLatency, m.latencySeconds[i]);
    l.slowestBandwidth = std::min(l.slowestBandwidth, m.bytesPerSecond[i]);
    l.serverBandwidth = std::max(l.serverBandwidth, m.bytesPerSecond[i]);  // the server's own link
  }
  return l;
}

double message(double bytes, double latency, double bandwidth) { return latency + bytes / bandwidth; }

double kthFastest(const ProbeMeasurements& m, int n, int k) {
  std::vector<double> times(m.computeSeconds.begin(), m.computeSeconds.begin() + n);
  std::nth_element(times.begin(), times.begin() + (k - 1), times.end());
  return times[static_cast<std::size_t>(k - 1)];
}

}  // namespace pstrain::exchanges
