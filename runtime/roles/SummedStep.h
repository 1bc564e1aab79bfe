#pragma once
// A step from a summed gradient held in step messages (protocol/StepProtocol.h): one
// server's update, a peer's, the rounds' outer step with one server and their worker's
// local steps. Admission says whether and divided by what, RangeUpdate steps the weights.
#include <cstdint>

#include "models/Registry.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/Admission.h"
#include "runtime/roles/RangeUpdate.h"
#include "runtime/roles/StepStats.h"

namespace pstrain::roles {

// The update from messages.up, which holds the sum of the up messages of `contributors`
// micro-batches (a worker's up message sums those of its virtual shards), by `update` (the
// whole model, its sum messages.grad): the weights stepped with the gradient of the mean loss
// over trailer[kSamples] samples (its L2 norm clipped to --clip-grad-norm first), and
// messages.serverBuffers (and `model`'s buffers) set to the micro-batches' mean buffers.
// Returns false, changing nothing, where `admission` skips it (Admission::divisor); throws
// Error naming `step` where it is not finite otherwise. With loss scaling the workers divided
// their gradients by the scale already.
bool applySummed(Admission& admission, RangeUpdate& update, protocol::StepMessages& messages, models::Net& model,
                 double lr, int contributors, std::int64_t step);
// The same over the floats [begin, begin + count) of `update`'s range alone (streamed
// rounds: one fragment's outer step), the rest of the weights and their optimizer state left
// as they are; the admission sees that part's sum alone.
bool applySummedPart(Admission& admission, RangeUpdate& update, protocol::StepMessages& messages, models::Net& model,
                     double lr, int contributors, std::int64_t step, std::int64_t begin, std::int64_t count);

// messages.serverBuffers and `model`'s buffers: the mean of the summed ones.
void averageBuffers(protocol::StepMessages& messages, models::Net& model, int contributors);

// The accounting in the trailer of messages.up, summed over `contributors` workers: loss
// and samples as sums, compute and data-wait times as the contributors' mean, and the
// slowest contributor's compute time.
StepStats summedStats(const protocol::StepMessages& messages, int contributors);

}  // namespace pstrain::roles
