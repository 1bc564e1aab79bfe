// macOS: <libproc.h> (xnu libsyscall/wrappers/libproc/libproc.h), the part pstrain uses.
// See ../README.
#pragma once
#include <stdint.h>
#include <sys/types.h>

// From <sys/proc_info.h> (xnu bsd/sys/proc_info.h), which <libproc.h> includes.
#define PROC_PIDTASKINFO 4
struct proc_taskinfo {
  uint64_t pti_virtual_size;   /* virtual memory size (bytes) */
  uint64_t pti_resident_size;  /* resident memory size (bytes) */
  uint64_t pti_total_user;     /* total time */
  uint64_t pti_total_system;
  uint64_t pti_threads_user;   /* existing threads only */
  uint64_t pti_threads_system;
  int32_t pti_policy;          /* default policy for new threads */
  int32_t pti_faults;          /* number of page faults */
  int32_t pti_pageins;         /* number of actual pageins */
  int32_t pti_cow_faults;      /* number of copy-on-write faults */
  int32_t pti_messages_sent;   /* number of messages sent */
  int32_t pti_messages_received; /* number of messages received */
  int32_t pti_syscalls_mach;   /* number of mach system calls */
  int32_t pti_syscalls_unix;   /* number of unix system calls */
  int32_t pti_csw;             /* number of context switches */
  int32_t pti_threadnum;       /* number of threads in the task */
  int32_t pti_numrunning;      /* number of running threads */
  int32_t pti_priority;        /* task priority*/
};
#ifdef __cplusplus
extern "C" {
#endif
int proc_listchildpids(pid_t ppid, void* buffer, int buffersize);
int proc_pidinfo(int pid, int flavor, uint64_t arg, void* buffer, int buffersize);
#ifdef __cplusplus
}
#endif
