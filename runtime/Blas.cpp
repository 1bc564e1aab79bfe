#include "runtime/Blas.h"

#include "runtime/Portable.h"

#include <fmt/format.h>

namespace pstrain {

namespace {

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// The first `words` space-separated words of `text`.
std::string firstWords(const std::string& text, int words) {
  std::size_t end = 0;
  for (int i = 0; i < words && end != std::string::npos; ++i) end = text.find(' ', end + (i > 0));
  return text.substr(0, end);
}

std::string openBlasName(const std::string& file) {
  using Text = char* (*)();
  using Number = int (*)();
  auto config = reinterpret_cast<Text>(portable::symbolAddress("openblas_get_config", file));
  auto core = reinterpret_cast<Text>(portable::symbolAddress("openblas_get_corename", file));
  auto parallel = reinterpret_cast<Number>(portable::symbolAddress("openblas_get_parallel", file));
  std::string name = config ? firstWords(config(), 2) : "OpenBLAS";  // "OpenBLAS 0.3.21 ..."
  std::string details;
  if (parallel) {
    const int kind = parallel();  // OpenBLAS's own codes
    details = kind == 0 ? "serial" : kind == 1 ? "pthreads" : kind == 2 ? "OpenMP" : "threads " + std::to_string(kind);
  }
  if (core) details += (details.empty() ? "" : ", ") + std::string(core());
  return details.empty() ? name : fmt::format("{} ({})", name, details);
}

}  // namespace

BlasInfo loadedBlas(const std::string& built) {
  BlasInfo blas;
  blas.library = portable::libraryDefining("sgemm_");
  const std::string& file = blas.library;
  // A symbol of the library's own, in that file or what it loads (Debian's OpenBLAS
  // libblas.so.3 wraps libopenblas.so.0). Not anywhere in the process: Debian's OpenBLAS
  // LAPACK loads libopenblas.so.0 beside a reference libblas.so.3, whose sgemm_ is the one called.
  auto defines = [&](const char* symbol) { return portable::symbolAddress(symbol, file) != nullptr; };
  if (file.empty()) {
    blas.name = built.empty() ? "unknown" : fmt::format("{} (linked into libtorch)", built);
  } else if (defines("openblas_get_config") || contains(file, "openblas")) {
    blas.name = openBlasName(file);
  } else if (defines("MKL_Get_Version_String") || contains(file, "mkl")) {
    blas.name = "Intel MKL";
  } else if (defines("bli_info_get_version_str") || contains(file, "blis")) {
    blas.name = "BLIS";
  } else if (contains(file, "atlas")) {
    blas.name = "ATLAS";
  } else if (contains(file, "Accelerate") || contains(file, "vecLib")) {
    blas.name = "Apple Accelerate";
  } else if (contains(file, "libtorch")) {
    blas.name = built.empty() ? "linked into libtorch" : fmt::format("{} (linked into libtorch)", built);
  } else if (contains(file, "libblas") || contains(file, "librefblas")) {
    // A plain libblas that none of the optimized ones claims: netlib's (Debian's
    // /usr/lib/<arch>/blas/libblas.so.3, Fedora's and Arch's blas packages).
    blas.name = "reference BLAS (netlib)";
    blas.reference = true;
  } else {
    blas.name = file.substr(file.rfind('/') + 1);
  }
  return blas;
}

bool setBlasThreads(int threads) {
  using SetThreads = void (*)(int);
  auto set = reinterpret_cast<SetThreads>(
      portable::symbolAddress("openblas_set_num_threads", portable::libraryDefining("sgemm_")));
  if (!set) return false;
  set(threads);
  return true;
}

const char* blasFixCommand() {
#if defined(__APPLE__)
  return "brew reinstall pytorch";  // Homebrew's libtorch comes with its optimized BLAS
#else
  return "sudo apt-get install libopenblas0-pthread";
#endif
}

}  // namespace pstrain
