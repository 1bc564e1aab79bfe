// libFuzzer target: what arrives from other ranks before the weights are trusted: the
// step header of a down message, the start-up facts, a trailer's step number, and doorbell
// rings (from anyone on the network). Any input parses or is a CommError (or no ring).
#include <cmath>
#include <cstring>

#include "runtime/Errors.h"
#include "runtime/comm/Doorbell.h"
#include "runtime/protocol/Handshake.h"
#include "runtime/protocol/StepProtocol.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto header = pstrain::protocol::parseStepHeader(data, size);
    if (header.step < 0 || !(std::isfinite(header.lossScale) && header.lossScale > 0)) __builtin_trap();
  } catch (const pstrain::CommError&) {
  }
  try {
    auto facts = pstrain::protocol::decodeFacts(std::string(reinterpret_cast<const char*>(data), size), 1);
    pstrain::protocol::Facts list(facts.begin(), facts.end());
    // What decodes must encode back to something that decodes the same.
    if (pstrain::protocol::decodeFacts(pstrain::protocol::encodeFacts(list), 1) != facts) __builtin_trap();
  } catch (const pstrain::CommError&) {
  }
  // A ring: the input as a datagram parses only with a valid MAC under the job's key (rung
  // at rank 1), and then encodes back to itself; a ring made of the input's rank and
  // counter parses back to them, under that key alone, at the rank rung alone, and only
  // with its rank among the ranks.
  using pstrain::comm::Doorbell;
  const Doorbell::Key key{0x0123456789abcdefull, 0x0f1e2d3c4b5a6978ull};
  if (auto ring = Doorbell::parseRing(data, size, key, 16, 1)) {
    if (size != Doorbell::kRingBytes || ring->rank >= 16) __builtin_trap();
    unsigned char again[Doorbell::kRingBytes];
    Doorbell::encodeRing(key, *ring, 1, again);
    if (std::memcmp(again, data, sizeof again) != 0) __builtin_trap();
  }
  if (size >= 12) {
    Doorbell::Ring made;
    for (std::size_t i = 0; i < 4; ++i) made.rank = made.rank << 8 | data[i];
    for (std::size_t i = 4; i < 12; ++i) made.counter = made.counter << 8 | data[i];
    unsigned char bytes[Doorbell::kRingBytes];
    const std::uint32_t to = made.rank ^ 1;
    Doorbell::encodeRing(key, made, to, bytes);
    const std::size_t ranks = std::size_t(made.rank) + 1;
    auto back = Doorbell::parseRing(bytes, sizeof bytes, key, ranks, to);
    if (!back || back->rank != made.rank || back->counter != made.counter) __builtin_trap();
    if (Doorbell::parseRing(bytes, sizeof bytes, key, ranks - 1, to)) __builtin_trap();                  // no such rank
    if (Doorbell::parseRing(bytes, sizeof bytes, {key.k0, key.k1 + 1}, ranks, to)) __builtin_trap();  // another job's key
    if (Doorbell::parseRing(bytes, sizeof bytes, key, ranks, to ^ 2)) __builtin_trap();             // another rank rung
  }
  if (size >= sizeof(float)) {
    float value;
    std::memcpy(&value, data, sizeof value);
    try {
      const std::int64_t step = pstrain::protocol::trailerVersion(value, 1);
      if (step < 0 || step > pstrain::protocol::kMaxVersionedSteps) __builtin_trap();
    } catch (const pstrain::CommError&) {
    }
  }
  return 0;
}
