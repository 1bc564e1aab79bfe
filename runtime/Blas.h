#pragma once
// Which BLAS this process computes with. Most of a CPU step is sgemm, and the library that
// provides it decides the speed: Debian's libtorch calls whatever the libblas.so.3
// alternative points to, by default netlib's reference BLAS, about 3 times slower than
// OpenBLAS on a LeNet step (README, "Speed"). Torch-free.
#include <string>

namespace pstrain {

struct BlasInfo {
  std::string name;     // "OpenBLAS 0.3.21 (serial, Haswell)", "reference BLAS (netlib)", ...
  std::string library;  // the file that defines sgemm_, links resolved; "" if none does
  bool reference = false;  // netlib's unoptimized reference implementation
};

// The BLAS loaded into this process, found from the library that defines the Fortran
// symbol sgemm_ (and OpenBLAS's, BLIS's, MKL's own symbols for their versions). When no
// loaded library exports sgemm_ (a libtorch with its BLAS linked in statically), `built`
// names it: libtorch's BLAS_INFO, as at::show_config() reports it.
BlasInfo loadedBlas(const std::string& built);

// The command that replaces the reference BLAS on this system with an optimized one.
const char* blasFixCommand();

// Makes the loaded BLAS use `threads` threads per call, where it has threads of its own
// (OpenBLAS's pthreads and OpenMP builds start as many as the machine has cores, whatever
// libtorch's thread count says). Returns whether the BLAS took it.
bool setBlasThreads(int threads);

}  // namespace pstrain
