#pragma once
// A key range: floats [begin, end) of a model's flat parameters (protocol/FlatParameters.h),
// with the shapes of its tensors. A server of K holds one (exchanges/Ranges.h cuts them);
// one server's is the whole model. Torch-free.
#include <cstdint>

#include "runtime/codec/Codec.h"

namespace pstrain::protocol {

struct KeyRange {
  std::int64_t begin = 0, end = 0;  // [begin, end) of the flat parameter vector
  codec::Shapes shapes;             // its tensors' shapes; a piece of a cut tensor is 1-D
  std::int64_t size() const { return end - begin; }
};

}  // namespace pstrain::protocol
