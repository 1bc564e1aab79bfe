#pragma once
#include <c10/core/Device.h>

#include <string>

#include "runtime/Blas.h"

namespace pstrain::launcher {

// The device for --device `wanted`: "auto" takes Apple MPS if available, else CUDA (the GPU
// numbered localRank modulo the GPU count), else the CPU. Asking for a device this build
// or machine lacks is a ConfigError.
c10::Device chooseDevice(const std::string& wanted, int localRank);

// Whether this build and machine have a device of `type` (the CPU always; CUDA with a CUDA
// libtorch and a visible GPU; MPS with a libtorch of 1.12 or newer on Apple silicon or AMD).
bool deviceAvailable(c10::DeviceType type);

// The BLAS this process computes with on the CPU (loadedBlas, with libtorch's own BLAS_INFO
// for a libtorch that links its BLAS in).
BlasInfo processBlas();

// This process computes with `threads` threads: libtorch's intra-op threads, and the BLAS's
// threads per call (an OpenBLAS that starts one per core would oversubscribe the ranks).
void setComputeThreads(int threads);

}  // namespace pstrain::launcher
