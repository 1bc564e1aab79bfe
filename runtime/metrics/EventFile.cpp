#include "runtime/metrics/EventFile.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Varint.h"

namespace pstrain::metrics {
namespace {

std::array<std::uint32_t, 256> crcTable() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

// Protocol buffers' wire format, the few pieces an Event needs: a field's key is
// (number << 3 | wire type); varints carry 7 bits per byte, low bits first.
enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void putKey(std::string& out, std::uint32_t field, WireType type) { putVarint(out, (field << 3) | type); }

template <typename T>
void putLittleEndian(std::string& out, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

void putBytes(std::string& out, std::uint32_t field, const std::string& bytes) {
  putKey(out, field, kLengthDelimited);
  putVarint(out, bytes.size());
  out += bytes;
}

void putDouble(std::string& out, std::uint32_t field, double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  putKey(out, field, kFixed64);
  putLittleEndian(out, bits);
}

// tensorflow/core/util/event.proto and framework/summary.proto: Event {double wall_time = 1;
// int64 step = 2; string file_version = 3; Summary summary = 5}, Summary {repeated Value
// value = 1}, Value {string tag = 1; float simple_value = 2}.
std::string eventHeader(double wallTime, std::int64_t step) {
  std::string event;
  putDouble(event, 1, wallTime);
  if (step != 0) {  // proto3 leaves a default value out
    putKey(event, 2, kVarint);
    putVarint(event, static_cast<std::uint64_t>(step));  // int64: two's complement, as protobuf does
  }
  return event;
}

double unixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) {
  static const std::array<std::uint32_t, 256> table = crcTable();
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t maskedCrc32c(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string EventFile::record(const std::string& data) {
  std::string out;
  putLittleEndian(out, static_cast<std::uint64_t>(data.size()));
  putLittleEndian(out, maskedCrc32c(out.data(), 8));
  out += data;
  putLittleEndian(out, maskedCrc32c(data.data(), data.size()));
  return out;
}

std::string EventFile::versionEvent(double wallTime) {
  std::string event = eventHeader(wallTime, 0);
  putBytes(event, 3, "brain.Event:2");
  return event;
}

std::string EventFile::scalarEvent(double wallTime, std::int64_t step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string item;
    putBytes(item, 1, tag);
    const float f = static_cast<float>(value);
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    putKey(item, 2, kFixed32);
    putLittleEndian(item, bits);
    putBytes(summary, 1, item);
  }
  std::string event = eventHeader(wallTime, step);
  putBytes(event, 5, summary);
  return event;
}

EventFile::EventFile(const std::string& dir)
    : file_(fmt::format("{}/{}{}.{}.{}", dir, kEventFilePrefix, static_cast<std::int64_t>(unixSeconds()),
                        portable::hostName(), static_cast<long>(::getpid()))) {
  file_.append(record(versionEvent(unixSeconds())));
}

void EventFile::write(std::int64_t step, const Scalars& scalars) {
  file_.append(record(scalarEvent(unixSeconds(), step, scalars)));
}

}  // namespace pstrain::metrics
