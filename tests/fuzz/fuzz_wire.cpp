// libFuzzer target: what arrives from other ranks before the weights are trusted: the
// step header of a down message and the start-up facts. Any input parses or is a CommError.
#include "runtime/Errors.h"
#include "runtime/roles/Handshake.h"
#include "runtime/roles/StepProtocol.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto header = pstrain::roles::parseStepHeader(data, size);
    if (header.step < 0) __builtin_trap();
  } catch (const pstrain::CommError&) {
  }
  try {
    auto facts = pstrain::roles::decodeFacts(std::string(reinterpret_cast<const char*>(data), size), 1);
    pstrain::roles::Facts list(facts.begin(), facts.end());
    // What decodes must encode back to something that decodes the same.
    if (pstrain::roles::decodeFacts(pstrain::roles::encodeFacts(list), 1) != facts) __builtin_trap();
  } catch (const pstrain::CommError&) {
  }
  return 0;
}
