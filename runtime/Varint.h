#pragma once
// LEB128 varints (7 bits a byte, low bits first, high bit: more follow), as protocol buffers
// and the codecs' sparse indices write them.
#include <cstdint>
#include <string>

namespace pstrain {

// Appends `value` to `out` as a varint.
inline void putVarint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

}  // namespace pstrain
