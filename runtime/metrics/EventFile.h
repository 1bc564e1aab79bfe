#pragma once
// TensorBoard's event files, written directly (no TensorFlow, no protobuf library): a file of
// TFRecords, each framed as
//   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes, data, uint32
//   masked CRC-32C of the data,
// whose data are serialized `tensorflow.Event` protos: the first carries file_version
// "brain.Event:2", each later one wall_time, step and a Summary of scalar values (tag,
// simple_value). `tensorboard --logdir` on the directory or a parent of it shows them.
// Torch-free.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/metrics/RecordFile.h"

namespace pstrain::metrics {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `size` bytes, continuing `crc`
// (0 to start): the checksum TFRecords use.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);
// TFRecord's masking of a CRC stored next to the data it covers: rotated right by 15 bits
// plus 0xa282ead8.
std::uint32_t maskedCrc32c(const void* data, std::size_t size);

// One scalar of an event: its tag ("train/loss": TensorBoard groups by the part before the
// slash) and value, which the file stores as a float.
using Scalars = std::vector<std::pair<std::string, double>>;

// What every event file's name starts with (TensorBoard finds them by it).
inline constexpr const char* kEventFilePrefix = "events.out.tfevents.";

class EventFile {
 public:
  // Creates `dir`/events.out.tfevents.<unix seconds>.<host>.<pid>: a new file per process,
  // so that a resumed run or pseval adds one beside the earlier ones and TensorBoard reads
  // them as one run. Throws pstrain::Error when it cannot be created.
  explicit EventFile(const std::string& dir);

  // One event at `step` holding `scalars`, as one record of a RecordFile (whole or not at
  // all; a crash loses at most the record being written). Non-finite values are written
  // as they are (TensorBoard shows NaN). Throws pstrain::Error when the write fails.
  void write(std::int64_t step, const Scalars& scalars);
  const std::string& path() const { return file_.path(); }

  // The wire forms, for the tests: one framed record, and the serialized Event protos.
  static std::string record(const std::string& data);
  static std::string versionEvent(double wallTime);
  static std::string scalarEvent(double wallTime, std::int64_t step, const Scalars& scalars);

 private:
  RecordFile file_;
};

}  // namespace pstrain::metrics
