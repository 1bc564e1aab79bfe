// Linux's <fcntl.h> plus what macOS's adds and pstrain uses (xnu bsd/sys/fcntl.h). See ../README.
#pragma once
#include_next <fcntl.h>
#define F_FULLFSYNC 51 /* fsync and ask the drive to flush its cache to the media */
