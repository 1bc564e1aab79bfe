#pragma once
// What server 0 tells the other servers as point_to_point's tails arrive (Wire.h).
#include <cstdint>

namespace pstrain::exchanges {

// Point to point: server 0's word to the others on each tail it takes (Wire.h), or at the end.
struct Arrival {
  enum Kind : std::int64_t {
    Accept,  // `worker`'s gradient joins the coming update (the first one of it: its sum)
    Stale,   // `worker`'s gradient is dropped, and the worker gets the weights as they are
    Stop,    // the run ends: the workers whose gradient is in get the last weights (and the
             // last checkpoint is gathered)
    Drain,   // after Stop: as Stale, with the last weights
    End,     // nothing follows
  };
  std::int64_t kind = End;
  std::int64_t worker = -1;
};

}  // namespace pstrain::exchanges
