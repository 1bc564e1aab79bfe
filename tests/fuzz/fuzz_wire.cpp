// libFuzzer target: what arrives from other ranks before the weights are trusted: the
// step header of a down message, the start-up facts, a trailer's step number, and doorbell
// rings (from anyone on the network). Any input parses or is a CommError (or no ring).
#include <cstring>

#include "runtime/Errors.h"
#include "runtime/comm/Doorbell.h"
#include "runtime/protocol/Handshake.h"
#include "runtime/protocol/StepProtocol.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto header = pstrain::protocol::parseStepHeader(data, size);
    if (header.step < 0) __builtin_trap();
  } catch (const pstrain::CommError&) {
  }
  try {
    auto facts = pstrain::protocol::decodeFacts(std::string(reinterpret_cast<const char*>(data), size), 1);
    pstrain::protocol::Facts list(facts.begin(), facts.end());
    // What decodes must encode back to something that decodes the same.
    if (pstrain::protocol::decodeFacts(pstrain::protocol::encodeFacts(list), 1) != facts) __builtin_trap();
  } catch (const pstrain::CommError&) {
  }
  // A ring: accepted only with the token of the input's first 8 bytes and a rank below 16,
  // and then its rank is that of bytes 8..11.
  std::uint64_t token = 0;
  for (std::size_t i = 0; i < 8 && i < size; ++i) token = token << 8 | data[i];
  if (auto rank = pstrain::comm::Doorbell::parseRing(data, size, token, 16)) {
    if (size != pstrain::comm::Doorbell::kRingBytes || *rank >= 16) __builtin_trap();
    unsigned char again[pstrain::comm::Doorbell::kRingBytes];
    pstrain::comm::Doorbell::encodeRing(token, *rank, again);
    if (std::memcmp(again, data, sizeof again) != 0) __builtin_trap();
  }
  if (pstrain::comm::Doorbell::parseRing(data, size, token + 1, 16)) __builtin_trap();  // another job's token
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
