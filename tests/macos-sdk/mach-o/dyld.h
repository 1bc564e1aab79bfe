// macOS: <mach-o/dyld.h> (dyld), the part pstrain uses. See ../README.
#pragma once
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
// The executable's path into buf; returns -1 and sets *bufsize to the size needed when
// buf is too small.
extern int _NSGetExecutablePath(char* buf, uint32_t* bufsize);
#ifdef __cplusplus
}
#endif
