#pragma once
// The point-to-point exchange (backup, async): each worker pushes its gradient to the
// servers and gets weights back, at its own pace. An update takes the mode's quorum of
// gradients, and a stale one is dropped (backup) or computed again on the newest weights
// (async, Control::Retry); the counts go to metrics.jsonl (dropped, rejected, the staleness
// histogram). With --servers K, server k owns key range k (Ranges.h) and its slice of the
// optimizer state; server 0 decides each arrival and the others follow (Wire.h). One server
// is K = 1.
#include "runtime/exchanges/Exchange.h"

namespace pstrain::exchanges {

extern const Exchange kPointToPoint;

}  // namespace pstrain::exchanges
