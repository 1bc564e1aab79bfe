#pragma once
// The range servers' exchange (sync with --servers K > 1): ranks 0..K-1 are parameter servers,
// server k owning key range k of the weights (Ranges.h) with its slice of the optimizer
// state; the other ranks are workers, which send each range of their gradient to its server
// and receive each range of the new weights from it (Wire.h). Each server's link carries
// N x M / K each way per step instead of the one server's N x M. The update equals sync's
// with one server: the same sums in the same worker order, clipping by the norm of the whole
// gradient (the servers' sums of squares combined), one verdict on skipping for all ranges.
// Server 0 also plays sync's rank 0: the header, the buffers, the accounting and the files;
// at a checkpoint every server sends it its range, so that a checkpoint is one model, as
// with one server, and --resume may change K.
#include "runtime/exchanges/Exchange.h"

namespace pstrain::exchanges {

extern const Exchange kRangeServers;

}  // namespace pstrain::exchanges
