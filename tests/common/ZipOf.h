#pragma once
// Zip archives for tests (tests/unit: .npz files, checkpoint archives, model files; the fuzz
// targets' mutations): stored or raw deflate members, with a central directory, laid out
// one after the other or where a crafted archive puts them; and an archive's members.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/zip/ZipDirectory.h"

namespace pstrain::testsupport {

inline void put(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

struct Member {
  std::string name, data;
  bool deflate = false;
  std::uint64_t declaredSize = 0;  // the uncompressed size the headers claim (0: the data's; a forged one for bombs)
  std::uint64_t extraBytes = 0;    // of zeros, in its local header's extra field
};

// Where a record goes in zipAt: after the records before it (kAppend), or with its local
// header at a given offset, over whatever bytes are there (a crafted archive's overlap).
constexpr std::uint64_t kAppend = ~std::uint64_t(0);

// A zip archive of `members` (stored, or raw deflate): first those whose `at[i]` is kAppend
// (all when `at` is empty), one after the other; then the others, in order, each with its
// local header at `at[i]` over what is there; then the central directory, in the members'
// order, after the last byte written. Where each record's data begin goes to `dataAt`
// (unless null).
inline std::string zipAt(const std::vector<Member>& members, const std::vector<std::uint64_t>& at,
                         std::vector<std::uint64_t>* dataAt = nullptr) {
  std::vector<std::string> records(members.size());
  std::vector<std::uint32_t> crcs(members.size());
  std::vector<std::uint64_t> bodies(members.size()), offsets(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    const Member& m = members[i];
    crcs[i] = static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(m.data.data()),
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
    bodies[i] = body.size();
    std::string& record = records[i];
    put(record, 0x04034b50, 4);
    put(record, 20, 2), put(record, 0, 2), put(record, m.deflate ? 8 : 0, 2), put(record, 0, 4);
    put(record, crcs[i], 4), put(record, body.size(), 4), put(record, m.declaredSize ? m.declaredSize : m.data.size(), 4);
    put(record, m.name.size(), 2), put(record, m.extraBytes, 2);
    record += m.name + std::string(m.extraBytes, '\0') + body;
  }
  std::string out;
  const auto placed = [&](std::size_t i) { return i < at.size() && at[i] != kAppend; };
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (placed(i)) continue;
    offsets[i] = out.size();
    out += records[i];
  }
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (!placed(i)) continue;
    offsets[i] = at[i];
    if (out.size() < at[i] + records[i].size()) out.resize(at[i] + records[i].size(), '\0');
    out.replace(at[i], records[i].size(), records[i]);
  }
  if (dataAt) {
    dataAt->clear();
    for (std::size_t i = 0; i < members.size(); ++i) {
      dataAt->push_back(offsets[i] + 30 + members[i].name.size() + members[i].extraBytes);
    }
  }
  std::string directory;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const Member& m = members[i];
    put(directory, 0x02014b50, 4);
    put(directory, 20, 2), put(directory, 20, 2), put(directory, 0, 2), put(directory, m.deflate ? 8 : 0, 2);
    put(directory, 0, 4), put(directory, crcs[i], 4), put(directory, bodies[i], 4);
    put(directory, m.declaredSize ? m.declaredSize : m.data.size(), 4);
    put(directory, m.name.size(), 2), put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 2);
    put(directory, 0, 2), put(directory, 0, 4), put(directory, offsets[i], 4);
    directory += m.name;
  }
  const std::uint64_t where = out.size();
  out += directory;
  put(out, 0x06054b50, 4);
  put(out, 0, 2), put(out, 0, 2), put(out, members.size(), 2), put(out, members.size(), 2);
  put(out, directory.size(), 4), put(out, where, 4), put(out, 0, 2);
  return out;
}

// A zip archive of `members` (stored, or raw deflate), one record after the other, with a
// central directory.
inline std::string zipOf(const std::vector<Member>& members) { return zipAt(members, {}); }

// The records of a zip archive, inflated; empty when `bytes` is not one (or holds a record
// of 16 MiB or more, deflated).
inline std::vector<Member> membersOf(const std::string& bytes) {
  std::vector<Member> members;
  try {
    const auto read = [&](std::uint64_t at, void* out, std::size_t n) {
      if (at > bytes.size() || n > bytes.size() - at) throw std::runtime_error("out");
      std::memcpy(out, bytes.data() + at, n);
    };
    const auto fail = [](const std::string& what) { throw std::runtime_error(what); };
    for (const zip::Entry& e : zip::readDirectory(bytes.size(), read, fail)) {
      const std::uint64_t at = zip::dataOffset(e, bytes.size(), read, fail);
      std::string data;
      if (e.method == 0) {
        data = bytes.substr(at, e.size);
      } else if (e.method == 8 && e.size < (1u << 24)) {
        data.resize(e.size);
        z_stream z{};
        inflateInit2(&z, -MAX_WBITS);
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + at));
        z.avail_in = static_cast<uInt>(e.compressedSize);
        z.next_out = reinterpret_cast<Bytef*>(data.data());
        z.avail_out = static_cast<uInt>(data.size());
        inflate(&z, Z_FINISH);
        data.resize(z.total_out);
        inflateEnd(&z);
      } else {
        return {};
      }
      members.push_back({e.name, data, e.method == 8, 0});
    }
  } catch (const std::exception&) {
    return {};
  }
  return members;
}

}  // namespace pstrain::testsupport
