// macOS: <sys/sysctl.h> (xnu bsd/sys/sysctl.h and bsd/sys/proc.h), the part pstrain uses.
// See ../README.
#pragma once
#include <stddef.h>
#include <sys/time.h>
#include <sys/types.h>
#define CTL_KERN 1
#define KERN_PROC 14
#define KERN_PROC_PID 1
struct extern_proc {
  union {
    struct {
      struct proc* __p_forw;
      struct proc* __p_back;
    } p_st1;
    struct timeval __p_starttime;
  } p_un;
#define p_starttime p_un.__p_starttime
  /* the members after p_un (pstrain reads none) are left out */
};
struct kinfo_proc {
  struct extern_proc kp_proc;
};
#ifdef __cplusplus
extern "C" {
#endif
int sysctl(int*, unsigned int, void*, size_t*, void*, size_t);
#ifdef __cplusplus
}
#endif
