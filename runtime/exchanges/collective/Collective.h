#pragma once
// The collective exchange (sync): each step rank 0 broadcasts the weights and the workers'
// gradients are sum-reduced to it (with --overlap, bucket by bucket: the reduce runs during
// backward and each bucket's weights start down as soon as it is updated), then rank 0
// applies the update. The workers compute the step's batches in lockstep.
#include "runtime/exchanges/Exchange.h"

namespace pstrain::exchanges {

extern const Exchange kCollective;

}  // namespace pstrain::exchanges
