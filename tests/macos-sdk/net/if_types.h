// macOS: <net/if_types.h> (xnu bsd/net/if_types.h), the part pstrain uses. See ../README.
#pragma once
#define IFT_BRIDGE 0xd1 /* transparent bridge interface (Thunderbolt Bridge is bridge0) */
