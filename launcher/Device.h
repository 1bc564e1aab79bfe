#pragma once
#include <c10/core/Device.h>

#include <string>

namespace pstrain::launcher {

// The device for --device `wanted`: "auto" takes Apple MPS if available, else CUDA (the GPU
// numbered localRank modulo the GPU count), else the CPU. Asking for a device this build
// or machine lacks is a ConfigError.
c10::Device chooseDevice(const std::string& wanted, int localRank);

// Makes the C library keep the memory a training step frees for the next step. glibc's
// malloc otherwise serves many activation-sized blocks (from 128 KiB) with mmap and returns
// them with munmap, so every step faults the same pages in again: about 10% of a ResNet-20
// step on the CPU (tools/bench (1)). Call once in a process that computes, after loading its
// data (whose big temporaries should go back to the kernel) and before the first step; a
// server does not (it would only keep pages it never reuses). A no-op where the C library
// is not glibc (macOS's allocator keeps freed regions by itself).
void keepFreedMemoryForReuse();

}  // namespace pstrain::launcher
