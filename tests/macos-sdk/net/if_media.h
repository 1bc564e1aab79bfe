// macOS: <net/if_media.h> (xnu bsd/net/if_media.h), the part pstrain uses. See ../README.
#pragma once
#define IFM_ETHER 0x00000020
#define IFM_IEEE80211 0x00000080
#define IFM_NMASK 0x000000e0 /* network type */
#define IFM_TYPE(x) ((x) & IFM_NMASK)
