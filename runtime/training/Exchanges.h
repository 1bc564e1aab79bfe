#pragma once
// Every exchange (exchanges/Exchange.h), one row each: the one place that names them all.
// A new exchange is its folder under runtime/exchanges/ and one line here. Torch-free.
#include "runtime/exchanges/Exchange.h"

namespace pstrain::training {

// The row that runs `mode` with `servers` (--servers): the first of its mode's exchange that
// takes that many servers (Exchange::takes); throws InternalError if none does.
const exchanges::Exchange& exchangeFor(config::Mode mode, int servers = 1);
const exchanges::Exchange& exchangeFor(const config::TrainConfig& cfg);

// This rank's part of args.cfg's mode. Collective over every rank of args.comm; throws on
// any error.
void runRole(const roles::RoleArgs& args);

}  // namespace pstrain::training
