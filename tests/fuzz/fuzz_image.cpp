// libFuzzer target: a model file's image (models/ModelFile.h) and libtorch's zip reader over it
// (models/ImageReader.h), without compiling its code: fast, so that the fuzzer reaches the
// layouts that matter. For any input, the image is refused (ConfigError) or:
//   - it passes or fails the archive check (zip/ArchiveCheck) with a ConfigError, never a crash;
//   - every record libtorch reads through the image is what pstrain's own zip reader finds
//     there (the checks read the pickles by the one, the loader by the other: were they to
//     disagree, what is checked would not be what is loaded), and a large storage's data
//     are read only whole, from the file, as they were when the image was read.
// Large storages are those of 64 bytes or more in this build (Fuzz.cmake). Mutated as archives
// (ArchiveMutator.h: records moved into storages' data among them) as well as bytes.
#include <caffe2/serialize/inline_container.h>
#include <zlib.h>

#include <cstring>
#include <memory>
#include <string>

#include "models/ImageReader.h"
#include "models/ModelFile.h"
#include "runtime/Errors.h"
#include "runtime/zip/ArchiveCheck.h"
#include "runtime/zip/ZipDirectory.h"
#include "tests/fuzz/ArchiveMutator.h"
#include "tests/fuzz/FuzzFile.h"

namespace {

// A record's bytes as pstrain's zip reader finds them in `image`, and where its data begin;
// false where it cannot.
bool recordOf(std::string_view image, const pstrain::zip::Entry& e, std::string& out, std::uint64_t& at) {
  const auto read = [&](std::uint64_t at, void* into, std::size_t n) {
    if (at > image.size() || n > image.size() - at) throw std::runtime_error("out");
    std::memcpy(into, image.data() + at, n);
  };
  const auto fail = [](const std::string& what) { throw std::runtime_error(what); };
  at = pstrain::zip::dataOffset(e, image.size(), read, fail);
  if (e.method == 0) {
    out.assign(image.substr(at, e.size));
    return e.size == e.compressedSize;
  }
  if (e.method != 8 || e.size > (1u << 24)) return false;
  out.assign(e.size, '\0');
  z_stream z{};
  inflateInit2(&z, -MAX_WBITS);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(image.data() + at));
  z.avail_in = static_cast<uInt>(e.compressedSize);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  inflateEnd(&z);
  return rc == Z_STREAM_END && z.total_out == e.size;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pstrain;
  const std::string path = fuzz::writeInput(data, size, "image.pt");
  std::unique_ptr<models::ModelFile> file;
  try {
    file = std::make_unique<models::ModelFile>(path);
    const zip::ArchiveContents contents = zip::checkArchive(
        file->image(), zip::ArchiveKind::ModelFile, [](const std::string& what) { throw ConfigError(what); });
    file->confirmStorages(contents.storages);
  } catch (const ConfigError&) {
    return 0;
  }
  const std::string_view image = file->image();
  const auto read = [&](std::uint64_t at, void* into, std::size_t n) { std::memcpy(into, image.data() + at, n); };
  const auto fail = [](const std::string& what) { throw std::runtime_error(what); };
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(
        std::make_shared<models::ImageReader>(*file, /*defer=*/false));
  } catch (const std::exception&) {
    return 0;
  }
  for (const zip::Entry& e : zip::readDirectory(image.size(), read, fail)) {  // checked: readable
    const std::string name = e.name.substr(e.name.find('/') + 1);  // libtorch's names are under the root
    std::string ours;
    std::uint64_t at = 0;
    if (e.name.find('/') == std::string::npos || !recordOf(image, e, ours, at) || !reader->hasRecord(name)) continue;
    try {
      const auto [bytes, n] = reader->getRecord(name);
      const std::string theirs(static_cast<const char*>(bytes.get()), n);
      // A large storage's data: zeros in the image, the file's as the loader reads them.
      if (file->isStorageData(at, ours.size())) ours.assign(reinterpret_cast<const char*>(data) + at, ours.size());
      if (theirs != ours) __builtin_trap();  // the checks and the loader would see other bytes
    } catch (const std::exception&) {
    }
  }
  return 0;
}
