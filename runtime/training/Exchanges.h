#pragma once
// Every exchange (exchanges/Exchange.h), one row each: the one place that names them all.
// A new exchange is its folder under runtime/exchanges/ and one line here. Torch-free.
#include "runtime/exchanges/Exchange.h"

namespace pstrain::training {

// The row of `exchange`; throws InternalError if it has none.
const exchanges::Exchange& exchangeOf(config::Exchange exchange);
// The row a run of `mode` with `servers` (--servers) takes: its mode's, or with more than one
// server the sharded one (sync's only).
const exchanges::Exchange& exchangeFor(config::Mode mode, int servers);
const exchanges::Exchange& exchangeFor(const config::TrainConfig& cfg);

// This rank's part of args.cfg's mode. Collective over every rank of args.comm; throws on
// any error.
void runRole(const roles::RoleArgs& args);

}  // namespace pstrain::training
