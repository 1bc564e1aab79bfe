// Linux's <net/if.h> plus what macOS's adds and pstrain uses (xnu bsd/net/if.h). See ../README.
#pragma once
#include_next <net/if.h>
#include <net/if_var.h>
#pragma pack(4)
struct ifmediareq {
  char ifm_name[IFNAMSIZ];
  int ifm_current;
  int ifm_mask;
  int ifm_status;
  int ifm_active;
  int ifm_count;
  int* ifm_ulist;
};
#pragma pack()
