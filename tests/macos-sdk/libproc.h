// macOS: <libproc.h> (xnu libsyscall/wrappers/libproc/libproc.h), the part pstrain uses.
// See ../README.
#pragma once
#include <sys/types.h>
#ifdef __cplusplus
extern "C" {
#endif
int proc_listchildpids(pid_t ppid, void* buffer, int buffersize);
#ifdef __cplusplus
}
#endif
