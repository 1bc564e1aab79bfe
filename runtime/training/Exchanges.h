#pragma once
// The roles of each exchange (config/Mode.h), chosen here once from the mode's row: what
// rank 0 runs and what every other rank runs. A new exchange is its loops and one row of
// Exchanges.cpp; the roles themselves never ask which exchange they serve.
#include "runtime/roles/RoleArgs.h"

namespace pstrain::roles {

// This rank's part of args.cfg's mode. Collective over every rank of args.comm; throws on
// any error.
void runRole(const RoleArgs& args);

}  // namespace pstrain::roles
