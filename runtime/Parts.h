#pragma once
// The size of the pieces in which pstrain moves big buffers: a range of weights between a
// server and its workers, a checkpoint's record served to rank 0, a model file read and
// checked, memory handed from one buffer to another. Big enough that what each piece costs
// (a message, a system call) vanishes beside its bytes; small enough that a few of them per
// peer are nothing beside a model.
#include <cstddef>
#include <cstdint>

namespace pstrain {

constexpr std::size_t kPartBytes = std::size_t(4) << 20;  // 4 MiB
constexpr std::int64_t kPartFloats = static_cast<std::int64_t>(kPartBytes / sizeof(float));

// The parts of a range of `floats`: [p * kPartFloats, min((p + 1) * kPartFloats, floats)).
constexpr std::int64_t partsOf(std::int64_t floats) { return (floats + kPartFloats - 1) / kPartFloats; }
constexpr std::int64_t partSize(std::int64_t floats, std::int64_t part) {
  return floats - part * kPartFloats < kPartFloats ? floats - part * kPartFloats : kPartFloats;
}

}  // namespace pstrain
