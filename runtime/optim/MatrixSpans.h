#pragma once
// Where --weight-decay-scope matrices lets weight decay fall, for optim::makeOptimizer (the
// one caller outside tests: a model's or a server's range's rule works out its own spans).
// Torch-free.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "runtime/codec/Codec.h"

namespace pstrain::optim {

using Spans = std::vector<std::pair<std::int64_t, std::int64_t>>;  // [begin, end) of a flat buffer, sorted

// The spans of the tensors of two dimensions or more (matrices, embeddings, convolutions'
// kernels) in the flat layout of tensors shaped `shapes` (in order), cut to [begin, end)
// and in its coordinates: what nanoGPT's parameter groups, timm and Hugging Face's Trainer
// decay (not biases, not norms' weights).
inline Spans matrixSpans(const codec::Shapes& shapes, std::int64_t begin = 0,
                   std::int64_t end = std::numeric_limits<std::int64_t>::max()) {
  Spans spans;
  std::int64_t at = 0;
  for (const auto& shape : shapes) {
    const std::int64_t size = std::accumulate(shape.begin(), shape.end(), std::int64_t(1), std::multiplies<>());
    const std::int64_t from = std::max(at, begin), to = std::min(at + size, end);
    if (shape.size() >= 2 && from < to) {
      if (!spans.empty() && spans.back().second == from - begin) {
        spans.back().second = to - begin;  // adjacent matrices: one span
      } else {
        spans.emplace_back(from - begin, to - begin);
      }
    }
    at += size;
  }
  return spans;
}

}  // namespace pstrain::optim
