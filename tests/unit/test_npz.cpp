// The .npz reader (data/Npz, over runtime/zip): archives written here byte by byte, as
// np.savez (stored) and np.savez_compressed (deflated) write them, good and damaged.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "data/Npz.h"
#include "runtime/Errors.h"
#include "tests/common/ScratchDir.h"

using namespace pstrain;

namespace {

// An .npy array: the magic, version 1.0, the header dict padded to 64 bytes, the data.
std::string npy(const std::string& descr, const std::string& shape, const std::string& data, bool fortran = false) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

template <typename T>
std::string bytesOf(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

void put(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

struct Member {
  std::string name, data;
  bool deflate = false;
};

// A zip archive of `members` (stored, or raw deflate), with a central directory.
std::string zipOf(const std::vector<Member>& members) {
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
    put(out, crc, 4), put(out, body.size(), 4), put(out, m.data.size(), 4);
    put(out, m.name.size(), 2), put(out, 0, 2);
    out += m.name + body;
    put(directory, 0x02014b50, 4);
    put(directory, 20, 2), put(directory, 20, 2), put(directory, 0, 2), put(directory, m.deflate ? 8 : 0, 2);
    put(directory, 0, 4), put(directory, crc, 4), put(directory, body.size(), 4), put(directory, m.data.size(), 4);
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

class Npz : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (scratch.path() / name).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  std::string errorOf(const std::string& path, const std::string& array) {
    try {
      data::NpzFile npz(path);
      npz.read(array, [](const data::NpyArray& a) {
        static std::vector<char> sink;
        sink.resize(a.elements() * a.itemSize);
        return static_cast<void*>(sink.data());
      });
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  }
  testsupport::ScratchDir scratch{"npz"};
};

const std::vector<float> kValues = {1.5f, -2, 3, 4.25f, 5, 6};

}  // namespace

TEST_F(Npz, ReadsStoredAndDeflatedArraysWithTheirShapes) {
  for (const bool deflate : {false, true}) {
    const std::string path = write(deflate ? "deflated.npz" : "stored.npz",
                                   zipOf({{"x.npy", npy("<f4", "(2, 3)", bytesOf(kValues)), deflate},
                                          {"y.npy", npy("<i8", "(2,)", bytesOf(std::vector<std::int64_t>{7, 9})), deflate},
                                          {"classes.npy", npy("<i8", "()", bytesOf(std::vector<std::int64_t>{10})), deflate}}));
    data::NpzFile npz(path);
    EXPECT_TRUE(npz.has("x"));
    EXPECT_FALSE(npz.has("z"));
    const data::NpyArray x = npz.header("x");
    EXPECT_EQ(x.dtype, "f4");
    EXPECT_EQ(x.shape, (std::vector<std::int64_t>{2, 3}));
    std::vector<float> values(6);
    npz.read("x", [&](const data::NpyArray&) { return static_cast<void*>(values.data()); });
    EXPECT_EQ(values, kValues);
    EXPECT_TRUE(npz.header("classes").shape.empty());  // a scalar
    EXPECT_EQ(npz.names(), (std::vector<std::string>{"classes", "x", "y"}));
  }
}

TEST_F(Npz, AMissingArrayNamesTheOnesThere) {
  const std::string path = write("one.npz", zipOf({{"x.npy", npy("<f4", "(6,)", bytesOf(kValues))}}));
  const std::string error = errorOf(path, "y_train");
  EXPECT_NE(error.find("no array 'y_train' (it holds: x)"), std::string::npos) << error;
}

TEST_F(Npz, DamagedArchivesAreClearErrors) {
  std::string good = zipOf({{"x.npy", npy("<f4", "(6,)", bytesOf(kValues))}});
  std::string flipped = good;
  flipped[100] ^= 0x55;  // inside x's data: the CRC-32 no longer matches
  EXPECT_NE(errorOf(write("flipped.npz", flipped), "x").find("CRC-32 mismatch"), std::string::npos);
  const std::string truncated = errorOf(write("truncated.npz", good.substr(0, good.size() / 2)), "x");
  EXPECT_NE(truncated.find("not an .npz file, or truncated"), std::string::npos) << truncated;
  EXPECT_NE(errorOf(write("text.npz", "just text, no zip at all"), "x").find("not an .npz"), std::string::npos);
  // The directory says more bytes than the member has.
  const std::string shortData = npy("<f4", "(8,)", bytesOf(kValues));
  const std::string shortError = errorOf(write("short.npz", zipOf({{"x.npy", shortData}})), "x");
  EXPECT_NE(shortError.find("holds 24 bytes of data, its shape needs 8 x 4"), std::string::npos) << shortError;
}

TEST_F(Npz, UnsupportedLayoutsSayWhatToDo) {
  const std::string big = errorOf(write("be.npz", zipOf({{"x.npy", npy(">f4", "(6,)", bytesOf(kValues))}})), "x");
  EXPECT_NE(big.find("dtype '>f4' is not supported"), std::string::npos) << big;
  const std::string fortran =
      errorOf(write("f.npz", zipOf({{"x.npy", npy("<f4", "(2, 3)", bytesOf(kValues), true)}})), "x");
  EXPECT_NE(fortran.find("Fortran order"), std::string::npos) << fortran;
}
