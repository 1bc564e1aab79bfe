#pragma once
// The tensors of a dataset whose format holds its samples in memory (data::TensorSamples):
// what the tests of those formats look into.
#include "data/Dataset.h"

namespace pstrain::testsupport {

inline const data::TensorSamples& tensorsOf(const data::Dataset& d) {
  return dynamic_cast<const data::TensorSamples&>(*d.samples);
}

}  // namespace pstrain::testsupport
