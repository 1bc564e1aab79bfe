#pragma once
// Every line a rank prints names its rank and host ("[2@mbp-1] step 120/938 ..."), so
// that mpirun's merged output says who said what. Lines are written whole, with one
// write(2) each, so that ranks sharing a terminal never interleave within a line.
#include <string>

namespace pstrain::launcher {

// From now on std::cout and std::cerr write "[RANK@HOST] " before every line (a line is
// written at its newline, or when the stream is flushed), and linePrefix() (ErrorLine.h)
// is that prefix. Call once, from main(), before other threads print.
void prefixLines(int rank, const std::string& host);

}  // namespace pstrain::launcher
