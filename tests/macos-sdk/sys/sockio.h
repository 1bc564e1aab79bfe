// macOS: <sys/sockio.h> (xnu bsd/sys/sockio.h; <sys/ioctl.h> includes it), the part pstrain
// uses. See ../README.
#pragma once
#include <net/if.h>
#include <sys/ioctl.h>
#define SIOCGIFMEDIA _IOWR('i', 56, struct ifmediareq)
