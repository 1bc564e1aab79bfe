#pragma once
// How --servers K cuts the flat parameter vector (protocol/FlatParameters.h's layout) into K
// contiguous key ranges, one per server (ps-lite's key ranges), balanced by bytes: each cut
// falls between two tensors when one such boundary lies within an eighth of a server's share
// of the even cut, else inside the tensor there at a multiple of kCutAlignFloats from its
// start. A cut between tensors keeps each tensor whole for the codecs that scale per tensor
// (int8: the same payload as one server's); a cut inside one keeps a model dominated by one
// big tensor (an embedding) balanced. The flat buffers are contiguous: no cut costs a copy.
// Torch-free.
#include <cstdint>
#include <vector>

#include "runtime/codec/Codec.h"
#include "runtime/protocol/KeyRange.h"

namespace pstrain::exchanges {

constexpr std::int64_t kCutAlignFloats = 1024;  // 4 KiB

using protocol::KeyRange;

// The K ranges of a model whose parameters have `shapes` (in order); with `wholeTensors`
// every cut falls between tensors (the nearest boundary: a gradient codec's frames are per
// tensor, and so stay what one server's are). The same arguments give the same ranges on
// every rank, and the same refusal: CollectiveConfigError when there are fewer floats (or
// tensors) than servers.
std::vector<KeyRange> keyRanges(const codec::Shapes& shapes, int servers, bool wholeTensors = false);

}  // namespace pstrain::exchanges
