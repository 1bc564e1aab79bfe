// Linux's <sys/socket.h> plus what macOS's adds and pstrain uses (xnu bsd/sys/socket.h).
// See ../README.
#pragma once
#include_next <sys/socket.h>
#define AF_LINK 18 /* link layer interface: getifaddrs' entries with an if_data */
#define SO_NOSIGPIPE 0x1022 /* APPLE: no SIGPIPE on EPIPE */
