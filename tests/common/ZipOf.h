#pragma once
// Zip archives for tests (tests/unit: .npz files, checkpoint archives): stored or raw
// deflate members, with a central directory.
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::testsupport {

inline void put(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

struct Member {
  std::string name, data;
  bool deflate = false;
  std::uint64_t declaredSize = 0;  // the uncompressed size the headers claim (0: the data's; a forged one for bombs)
};

// A zip archive of `members` (stored, or raw deflate), with a central directory.
inline std::string zipOf(const std::vector<Member>& members) {
  std::string out, directory;
  for (const Member& m : members) {
    const auto crc = static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(m.data.data()),
                                                      static_cast<uInt>(m.data.size())));
    std::string body = m.data;
    if (m.deflate) {
      z_stream z{};
      deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
      body.assign(deflateBound(&z, static_cast<uLong>(m.data.size())), '\0');
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(m.data.data()));
      z.avail_in = static_cast<uInt>(m.data.size());
      z.next_out = reinterpret_cast<Bytef*>(body.data());
      z.avail_out = static_cast<uInt>(body.size());
      deflate(&z, Z_FINISH);
      body.resize(z.total_out);
      deflateEnd(&z);
    }
    const std::uint64_t local = out.size();
    put(out, 0x04034b50, 4);
    put(out, 20, 2), put(out, 0, 2), put(out, m.deflate ? 8 : 0, 2), put(out, 0, 4);
    const std::uint64_t size = m.declaredSize ? m.declaredSize : m.data.size();
    put(out, crc, 4), put(out, body.size(), 4), put(out, size, 4);
    put(out, m.name.size(), 2), put(out, 0, 2);
    out += m.name + body;
    put(directory, 0x02014b50, 4);
    put(directory, 20, 2), put(directory, 20, 2), put(directory, 0, 2), put(directory, m.deflate ? 8 : 0, 2);
    put(directory, 0, 4), put(directory, crc, 4), put(directory, body.size(), 4), put(directory, size, 4);
    put(directory, m.name.size(), 2), put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 2);
    put(directory, 0, 2), put(directory, 0, 4), put(directory, local, 4);
    directory += m.name;
  }
  const std::uint64_t at = out.size();
  out += directory;
  put(out, 0x06054b50, 4);
  put(out, 0, 2), put(out, 0, 2), put(out, members.size(), 2), put(out, members.size(), 2);
  put(out, directory.size(), 4), put(out, at, 4), put(out, 0, 2);
  return out;
}

}  // namespace pstrain::testsupport
