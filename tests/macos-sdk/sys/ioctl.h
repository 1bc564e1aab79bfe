// Linux's <sys/ioctl.h> plus macOS's <sys/sockio.h>, which macOS's includes. See ../README.
#pragma once
#include_next <sys/ioctl.h>
#include <sys/sockio.h>
