#include <gtest/gtest.h>
#include <fmt/format.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <iterator>
#include <map>
#include <vector>

#include "models/Registry.h"
#include "models/StateDict.h"
#include "runtime/Errors.h"
#include "runtime/checkpoint/BytesReader.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/zip/ArchiveCheck.h"
#include "runtime/zip/ZipDirectory.h"
#include "runtime/zip/ZipWriter.h"
#include "tests/common/ScratchDir.h"
#include "tests/common/ZipOf.h"

using namespace pstrain;
namespace fs = std::filesystem;

namespace {

class Checkpoints : public ::testing::Test {
 protected:

  checkpoint::Checkpoint sample(std::int64_t step) {
    checkpoint::Checkpoint c;
    c.step = step;
    c.epoch = 1;
    c.model = "mlp";
    c.dataset = "synthetic";
    c.syntheticSize = 600;
    c.fingerprint = "0123456789abcdef";
    c.modelState = models::stateDict(*models::makeModel("mlp"));
    c.optimizerState = {{"exp_avg", {{"fc1.weight", torch::ones({256, 784})}}},
                        {"exp_avg_sq", {{"fc1.weight", torch::full({256, 784}, 2.0)}}}};
    c.optimizerSteps = 7;
    return c;
  }

  testsupport::ScratchDir scratch{"ckpt"};
  const fs::path& dir = scratch.path();
};

}  // namespace

TEST_F(Checkpoints, RoundTripKeepsEverything) {
  auto original = sample(500);
  std::string path = checkpoint::publish(dir.string(), original);
  EXPECT_EQ(fs::path(path).filename(), "step-00000500.pt");
  EXPECT_TRUE(fs::exists(dir / "step-00000500.ok"));
  auto listed = rundir::listPublished(dir.string());
  ASSERT_EQ(listed.size(), 1u);
  auto back = checkpoint::read(listed[0]);
  EXPECT_EQ(back.step, 500);
  EXPECT_EQ(back.epoch, 1);
  EXPECT_EQ(back.model, "mlp");
  EXPECT_EQ(back.syntheticSize, 600);
  EXPECT_EQ(back.fingerprint, original.fingerprint);
  ASSERT_EQ(back.modelState.size(), original.modelState.size());
  auto model = models::makeModel("mlp");
  models::loadStateDict(*model, back.modelState, path);
  for (std::size_t i = 0; i < original.modelState.size(); ++i) {
    EXPECT_TRUE(models::stateDict(*model)[i].second.equal(original.modelState[i].second));
  }
  ASSERT_EQ(back.optimizerState.size(), 2u);
  EXPECT_EQ(back.optimizerState[1].first, "exp_avg_sq");
  EXPECT_TRUE(back.optimizerState[0].second[0].second.equal(torch::ones({256, 784})));
  EXPECT_EQ(back.optimizerSteps, 7);
  EXPECT_FALSE(back.lossScale);  // a run without loss scaling saves none
}

// --loss-scale's state comes back as it went, as GradScaler.state_dict() names it.
TEST_F(Checkpoints, TheLossScaleRoundTrips) {
  auto original = sample(40);
  original.lossScale = checkpoint::Checkpoint::LossScale{32768.0, 17, 2000};
  checkpoint::publish(dir.string(), original);
  auto back = checkpoint::read(rundir::listPublished(dir.string())[0]);
  ASSERT_TRUE(back.lossScale);
  EXPECT_EQ(back.lossScale->scale, 32768.0);
  EXPECT_EQ(back.lossScale->goodSteps, 17);
  EXPECT_EQ(back.lossScale->growthInterval, 2000);
}

TEST_F(Checkpoints, UnpublishedFilesAreInvisibleAndOrderIsByStep) {
  checkpoint::publish(dir.string(), sample(20));
  checkpoint::publish(dir.string(), sample(3));
  std::ofstream(dir / "step-00000099.pt") << "half written";
  auto listed = rundir::listPublished(dir.string());
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].step, 3);
  EXPECT_EQ(listed[1].step, 20);
  EXPECT_TRUE(rundir::listPublished((dir / "nonexistent").string()).empty());
}

TEST_F(Checkpoints, TruncatedAndFlippedFilesAreDetected) {
  auto path = checkpoint::publish(dir.string(), sample(1));
  auto size = fs::file_size(path);
  {
    // Flip every bit of the middle byte (writing a fixed byte changes nothing where the
    // random weights already hold it: 1 run in 256).
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size / 2));
    const char byte = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.put(static_cast<char>(~byte));
  }
  try {
    checkpoint::read(rundir::listPublished(dir.string())[0]);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  fs::resize_file(path, size / 3);
  try {
    checkpoint::read(rundir::listPublished(dir.string())[0]);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST_F(Checkpoints, GarbageWithAMatchingMarkerIsNotAPickle) {
  std::string garbage(1000, 'x');
  rundir::atomicWrite((dir / "step-00000001.pt").string(), garbage);
  auto crc = crc32(0, reinterpret_cast<const Bytef*>(garbage.data()), 1000);
  rundir::atomicWrite((dir / "step-00000001.ok").string(),
                          fmt::format("pstrain-checkpoint 1\nbytes 1000\ncrc32 {:08x}\n", crc));
  try {
    checkpoint::read(rundir::listPublished(dir.string())[0]);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a valid checkpoint archive"), std::string::npos) << e.what();
  }
}

// libtorch's unpickler pops without checking that the items are there: a TUPLE3 on a
// one-item stack freed memory it never allocated (found by fuzz_checkpoint). The archive
// check refuses every pop the stack cannot serve before libtorch sees the pickle.
TEST_F(Checkpoints, PicklesThatPopMoreThanTheStackHoldsAreRefused) {
  using namespace std::string_literals;
  const std::string global = "ccollections\nOrderedDict\nq\x00"s;  // pushes one item, memoised
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"TUPLE3 on one item", global + "\x87."},
      {"TUPLE2 across a MARK", global + "(N\x86."},
      {"APPEND with nothing to append to", "\x80\x02Na."},
      {"SETITEMS with an odd item count", "\x80\x02}(NNNu."},
      {"APPENDS with no list below the MARK", "\x80\x02(Ne."},
      {"TUPLE without a MARK", global + "t."},
      {"STOP on an empty stack", "\x80\x02."},
  };
  for (const auto& [name, pickle] : cases) {
    std::string archive;
    {
      caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) -> std::size_t {
        archive.append(static_cast<const char*>(data), size);
        return size;
      });
      std::string body = pickle[0] == '\x80' ? pickle : "\x80\x02" + pickle;
      writer.writeRecord("data.pkl", body.data(), body.size());
      writer.writeEndOfFile();
    }
    const std::string path = (dir / "crafted.pt").string();
    rundir::atomicWrite(path, archive);
    try {
      checkpoint::readStateDict(path);
      ADD_FAILURE() << name << ": read";
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("underflow") != std::string::npos || what.find("MARK") != std::string::npos ||
                  what.find("odd number") != std::string::npos)
          << name << ": " << what;
    }
  }
}

// libtorch does not check a loaded tensor against its storage, nor a storage against its
// record: a data.pkl that gives fc1.weight a stride of 65535 (or 1000), fc1.bias an offset
// past the storage, or a storage more elements than its record holds made pseval and
// --resume crash or read garbage. The fuzz corpus keeps them (make_crafted_checkpoints.py).
TEST_F(Checkpoints, TensorsThatReachPastTheirStorageAreRefused) {
  const fs::path corpus = fs::path(PSTRAIN_FUZZ_CORPUS) / "checkpoint";
  auto publishCopy = [&](const std::string& name) {
    std::ifstream in(corpus / name, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(bytes.empty()) << name;
    rundir::atomicWrite((dir / "step-00000001.pt").string(), bytes);
    const auto crc = crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size()));
    rundir::atomicWrite((dir / "step-00000001.ok").string(),
                        fmt::format("pstrain-checkpoint 1\nbytes {}\ncrc32 {:08x}\n", bytes.size(), crc));
    return rundir::listPublished(dir.string()).at(0);
  };
  const checkpoint::Checkpoint good = checkpoint::read(publishCopy("convnet-step1.pt"));
  EXPECT_FALSE(good.modelState.empty());
  for (const char* name : {"crafted-stride-65535", "crafted-stride-1000", "crafted-offset-5000"}) {
    try {
      checkpoint::read(publishCopy(name));
      ADD_FAILURE() << name << ": read";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("reaches past its storage"), std::string::npos) << name << ": " << e.what();
    }
  }
  // A storage that declares more elements than its record holds (libtorch sizes it by the
  // count: 2^40 with an offset past the record died of SIGSEGV, 16 more read garbage): refused
  // before libtorch builds anything from it, in every loader of such archives.
  for (const char* name : {"crafted-storage-2e40", "crafted-storage-overrun"}) {
    const std::string declares = "storage '0' declares";
    try {
      checkpoint::read(publishCopy(name));
      ADD_FAILURE() << name << ": read";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(declares), std::string::npos) << name << ": " << e.what();
    }
    try {
      checkpoint::readStateDict((dir / "step-00000001.pt").string());  // trained_model.pt's loader
      ADD_FAILURE() << name << ": read as a state_dict";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(declares), std::string::npos) << name << ": " << e.what();
    }
  }
}

// A refusal of the input (ConfigError: exit 2 at once), not a damaged file (which pseval
// would read again and again for --retry-for).
TEST_F(Checkpoints, ACheckpointOfAnotherModelIsRefused) {
  auto path = checkpoint::publish(dir.string(), sample(1));
  auto back = checkpoint::read(rundir::listPublished(dir.string())[0]);
  auto lenet = models::makeModel("lenet");
  try {
    models::loadStateDict(*lenet, back.modelState, path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
}

TEST_F(Checkpoints, UnwritableDirectoryIsAClearError) {
  EXPECT_THROW(checkpoint::publish("/dev/null/pstrain-cannot-write-here", sample(1)), CheckpointError);
}

TEST_F(Checkpoints, PlainStateDictRoundTrip) {
  auto state = models::stateDict(*models::makeModel("convnet"));
  checkpoint::writeStateDict((dir / "w.pt").string(), state);
  auto back = checkpoint::readStateDict((dir / "w.pt").string());
  ASSERT_EQ(back.size(), state.size());
  for (std::size_t i = 0; i < state.size(); ++i) EXPECT_TRUE(back[i].second.equal(state[i].second));
}

// The state_dict file is streamed to disk; its bytes are exactly torch::pickle_save's.
// torch.load(weights_only=True), PyTorch's default since 2.6, refuses any global but a few
// (tensor rebuilding, storages, OrderedDict): a state_dict holds nothing else, in particular
// not the TorchScript type tags that torch::pickle_save puts on dicts.
TEST_F(Checkpoints, StateDictsHoldOnlyWhatTorchLoadWeightsOnlyAccepts) {
  auto state = models::stateDict(*models::makeModel("convnet"));
  checkpoint::writeStateDict((dir / "w.pt").string(), state);
  caffe2::serialize::PyTorchStreamReader reader((dir / "w.pt").string());
  auto [data, size] = reader.getRecord("data.pkl");
  const std::string pickle(static_cast<const char*>(data.get()), size);
  EXPECT_EQ(pickle.find("restore_type_tag"), std::string::npos);
  EXPECT_NE(pickle.find("_rebuild_tensor_v2"), std::string::npos);
  auto back = checkpoint::readStateDict((dir / "w.pt").string());
  ASSERT_EQ(back.size(), state.size());
  for (std::size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(back[i].first, state[i].first);
    EXPECT_TRUE(back[i].second.equal(state[i].second)) << state[i].first;
  }
}

// A server's parameters are views of one flat buffer: they are saved as one storage (the
// file is not bigger than the buffer plus a little) and read back as the right values.
TEST_F(Checkpoints, ViewsOfOneBufferRoundTrip) {
  at::Tensor flat = torch::arange(1000, torch::kFloat32);
  checkpoint::TensorList state = {{"a", flat.narrow(0, 0, 600).view({20, 30})}, {"b", flat.narrow(0, 600, 400)}};
  checkpoint::writeStateDict((dir / "v.pt").string(), state);
  EXPECT_LT(fs::file_size(dir / "v.pt"), 1000 * sizeof(float) + 2048);
  auto back = checkpoint::readStateDict((dir / "v.pt").string());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(back[0].second.equal(state[0].second));
  EXPECT_TRUE(back[1].second.equal(state[1].second));
}

// removeTree (std::filesystem::remove_all's stand-in): whole trees, links not followed.
TEST_F(Checkpoints, RemoveTreeDeletesEverythingBelowButNotWhatLinksPointAt) {
  fs::create_directories(dir / "tree/a/b");
  std::ofstream(dir / "tree/a/b/file") << "x";
  std::ofstream(dir / "kept") << "y";
  fs::create_symlink(dir / "kept", dir / "tree/a/link");
  fs::create_directory_symlink(dir, dir / "tree/loop");
  rundir::removeTree((dir / "tree").string());
  EXPECT_FALSE(fs::exists(dir / "tree"));
  EXPECT_TRUE(fs::exists(dir / "kept"));
  rundir::removeTree((dir / "tree").string());  // gone already: nothing to do
  std::ofstream(dir / "single") << "z";
  rundir::removeTree((dir / "single").string());
  EXPECT_FALSE(fs::exists(dir / "single"));
}

// libtorch finds data.pkl case-insensitively: so does the check, and names that differ only
// in case (the loader cannot tell which it reads) are refused.
TEST(ArchiveCheck, DataPklInAnyCaseIsCheckedAndDuplicateNamesAreRefused) {
  using testsupport::zipOf;
  const std::string good = std::string("\x80\x02}.", 4);  // PROTO 2, EMPTY_DICT, STOP
  const std::string unbalanced = std::string("\x80\x02t.", 4);  // TUPLE without a MARK
  auto errorOf = [](const std::string& bytes) {
    try {
      zip::checkArchive(bytes, zip::ArchiveKind::Checkpoint, [](const std::string& what) {
        throw CheckpointError(what);
      });
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(errorOf(zipOf({{"a/data.pkl", good}})), "");
  EXPECT_NE(errorOf(zipOf({{"a/DATA.PKL", unbalanced}})).find("without a MARK"), std::string::npos);
  EXPECT_NE(errorOf(zipOf({{"a/Data.pkl", good}, {"a/data.pkl", unbalanced}})).find("two records named a/data.pkl"),
            std::string::npos);
  EXPECT_NE(errorOf(zipOf({{"a/data.pkl", good}, {"a/data/0", "x"}, {"A/DATA/0", "y"}})).find("two records"),
            std::string::npos);
}

// A model file's deflated records (its code: torch.jit.save deflates it) are bounded before
// anything inflates them: a record past kMaxInflated (a zip bomb: 64 MiB of zeros deflate to
// 64 KiB), a header that claims more than the record holds, and records that add up past
// kMaxInflatedTotal are refused. A checkpoint's records may not be deflated at all.
TEST(ArchiveCheck, ModelFileZipBombsAreRefusedBeforeAnythingInflates) {
  using testsupport::zipOf;
  auto errorOf = [](const std::string& bytes, zip::ArchiveKind kind) {
    try {
      zip::checkArchive(bytes, kind, [](const std::string& what) { throw ConfigError(what); });
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string pickle = std::string("\x80\x02}.", 4);
  const std::string bomb = zipOf({{"a/data.pkl", pickle}, {"a/code/__torch__/m.py", std::string(zip::kMaxInflated + 1, '\0'), true}});
  EXPECT_LT(bomb.size(), std::size_t(1) << 20);
  EXPECT_NE(errorOf(bomb, zip::ArchiveKind::ModelFile).find("inflates to 67108865 bytes"), std::string::npos)
      << errorOf(bomb, zip::ArchiveKind::ModelFile);
  const std::string forged = zipOf({{"a/data.pkl", pickle}, {"a/code/m.py", "x = 1\n", true, zip::kMaxInflated + 1}});
  EXPECT_NE(errorOf(forged, zip::ArchiveKind::ModelFile).find("inflates to"), std::string::npos);
  std::vector<testsupport::Member> many = {{"a/data.pkl", pickle}};
  for (int i = 0; i < 5; ++i) many.push_back({"a/code/m" + std::to_string(i) + ".py", "x = 1\n", true, zip::kMaxInflated});
  EXPECT_NE(errorOf(zipOf(many), zip::ArchiveKind::ModelFile).find("record a/code/m4.py inflates to 67108864"),
            std::string::npos);  // the fifth: 5 x 64 MiB > 256 MiB
  EXPECT_NE(errorOf(bomb, zip::ArchiveKind::Checkpoint).find("is compressed"), std::string::npos);
}


// A file written from a stream (the trained TorchScript module): whole, past the 1 MiB
// block, and nothing at all when the writer declines (a zoo model has no TorchScript).
TEST_F(Checkpoints, StreamedFilesAreWholeOrNotThere) {
  const std::string path = (dir / "streamed.bin").string();
  std::string expected;
  for (int i = 0; i < 300000; ++i) expected += fmt::format("{:07d}\n", i);  // 2.4 MB
  EXPECT_TRUE(rundir::atomicWriteStream(path, [&](std::ostream& out) {
    out.write(expected.data(), 100);
    out << expected.substr(100);
    return true;
  }));
  std::ifstream in(path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), expected);
  const std::string declined = (dir / "declined.bin").string();
  EXPECT_FALSE(rundir::atomicWriteStream(declined, [](std::ostream& out) { out << "x"; return false; }));
  EXPECT_FALSE(fs::exists(declined));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temporary left
  const auto one = [](std::ostream& out) {
    out << "x";
    return true;
  };
  EXPECT_THROW(rundir::atomicWriteStream("/dev/null/cannot/streamed.bin", one), CheckpointError);
}

// zip::ZipWriter's archives are PyTorch's: libtorch's reader (and so torch.load) reads each
// record back whole however its bytes were given, in pieces or at once; so does our own
// reader, with zip64 fields too (forced here by a zero limit: a real archive needs them past
// 4 GiB, and miniz then refuses the small one, whose 32-bit offset fields say 0xFFFFFFFF
// while the file is shorter); every record's data starts on a 64-byte boundary.
TEST(ZipWriter, RecordsGivenInPiecesReadBackWhole) {
  std::string big(1000003, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 % 251);
  const std::vector<std::pair<std::string, std::string>> records = {
      {"archive/data/0", big}, {"archive/data/1", ""}, {"archive/data.pkl", "pickle bytes"}, {"archive/version", "3\n"}};
  for (const std::uint64_t zip64Above : {std::uint64_t(0xFFFFFFFEu), std::uint64_t(0)}) {
    std::string archive;
    zip::ZipWriter writer([&](const void* data, std::size_t n) { archive.append(static_cast<const char*>(data), n); },
                          zip64Above);
    for (const auto& record : records) {
      const std::string& bytes = record.second;  // (a structured binding: C++17 lambdas cannot capture one)
      writer.record(record.first, bytes.size(), [&](const zip::ZipWriter::Sink& write) {
        for (std::size_t at = 0; at < bytes.size(); at += 65537) write(bytes.data() + at, std::min<std::size_t>(65537, bytes.size() - at));
      });
    }
    writer.finish();
    EXPECT_EQ(writer.bytesWritten(), archive.size());
    const zip::Fail fail = [](const std::string& what) { throw std::runtime_error(what); };
    const auto read = [&](std::uint64_t at, void* out, std::size_t n) { std::memcpy(out, archive.data() + at, n); };
    const auto entries = zip::readDirectory(archive.size(), read, fail);
    ASSERT_EQ(entries.size(), records.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& [name, bytes] = records[i];
      EXPECT_EQ(entries[i].name, name);
      EXPECT_EQ(entries[i].size, bytes.size());
      const std::uint64_t at = zip::dataOffset(entries[i], archive.size(), read, fail);
      EXPECT_EQ(at % 64, 0u) << name;
      EXPECT_EQ(archive.substr(at, entries[i].size), bytes) << name << " zip64Above " << zip64Above;
      EXPECT_EQ(entries[i].crc, crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
    }
    if (zip64Above == 0) continue;
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<checkpoint::BytesReader>(archive));
    for (const auto& [name, bytes] : records) {
      auto [data, size] = reader.getRecord(name.substr(std::strlen("archive/")));
      EXPECT_EQ(std::string(static_cast<const char*>(data.get()), size), bytes) << name;
    }
  }
  std::string sink;
  zip::ZipWriter writer([&](const void* data, std::size_t n) { sink.append(static_cast<const char*>(data), n); });
  EXPECT_THROW(writer.record("short", 10, [](const zip::ZipWriter::Sink& write) { write("12345", 5); }), std::logic_error);
  EXPECT_THROW(writer.record("long", 2, [](const zip::ZipWriter::Sink& write) { write("12345", 5); }), std::logic_error);
}

// A checkpoint whose tensors a RecordSource gives in pieces holds what the tensors would
// have held: the source's bytes, not the placeholders'.
TEST_F(Checkpoints, ARecordSourceFillsTensorsInPieces) {
  auto ckpt = sample(3);
  std::map<const void*, at::Tensor> truth;  // by placeholder
  std::vector<at::Tensor> expected;
  for (auto& [name, tensor] : ckpt.modelState) {
    expected.push_back(torch::randn(tensor.sizes()));
    tensor = torch::zeros(tensor.sizes());
    truth[tensor.data_ptr()] = expected.back();
  }
  const checkpoint::RecordSource source = [&](const void* data, std::size_t bytes, const checkpoint::RecordWrite& write) {
    const auto it = truth.find(data);
    if (it == truth.end()) return false;  // the optimizer's: its own
    EXPECT_EQ(bytes, it->second.nbytes());
    const auto* from = static_cast<const char*>(it->second.data_ptr());
    for (std::size_t at = 0; at < bytes; at += 4096) write(from + at, std::min<std::size_t>(4096, bytes - at));
    return true;
  };
  const auto back = checkpoint::read({3, checkpoint::publish(dir.string(), ckpt, source)});
  ASSERT_EQ(back.modelState.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(back.modelState[i].second.equal(expected[i])) << back.modelState[i].first;
  }
  EXPECT_TRUE(back.optimizerState[0].second[0].second.equal(torch::ones({256, 784})));
}

// writeArchive rewrites what libtorch's zip writer saves: a record written from stable
// memory (a tensor's storage) takes the source's bytes, and a large record from the writer's
// own memory, gone once it returns, is copied as it is written (never read afterwards).
TEST_F(Checkpoints, ArchivesAreRewrittenWithTheSourcesBytes) {
  std::vector<float> placeholder(100000, 0.f), truth(100000);
  for (std::size_t i = 0; i < truth.size(); ++i) truth[i] = static_cast<float>(i) * 0.5f;
  const std::vector<checkpoint::MemoryRange> stable = {{placeholder.data(), placeholder.size() * sizeof(float)}};
  const checkpoint::RecordSource source = [&](const void* data, std::size_t bytes, const checkpoint::RecordWrite& write) {
    if (data != placeholder.data()) return false;
    EXPECT_EQ(bytes, truth.size() * sizeof(float));
    write(truth.data(), bytes / 2);
    write(reinterpret_cast<const char*>(truth.data()) + bytes / 2, bytes - bytes / 2);
    return true;
  };
  const std::string transient(200000, 't');
  const std::string path = (dir / "rewritten.pt").string();
  ASSERT_TRUE(checkpoint::writeArchive(path, [&](std::ostream& out) {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t n) {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
      return n;
    });
    writer.writeRecord("data/0", placeholder.data(), placeholder.size() * sizeof(float));
    {
      std::string gone = transient;  // freed before the archive is written again
      writer.writeRecord("data/1", gone.data(), gone.size());
    }
    const std::string code = "def f(): pass\n" + std::string(1000, '#');
    writer.writeRecord("code/x.py", code.data(), code.size(), /*compress=*/true);
    writer.writeEndOfFile();
    return true;
  }, stable, source));
  caffe2::serialize::PyTorchStreamReader reader(path);
  auto [weights, weightBytes] = reader.getRecord("data/0");
  ASSERT_EQ(weightBytes, truth.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(weights.get(), truth.data(), weightBytes), 0);
  auto [copied, copiedBytes] = reader.getRecord("data/1");
  EXPECT_EQ(std::string(static_cast<const char*>(copied.get()), copiedBytes), transient);
  auto [code, codeBytes] = reader.getRecord("code/x.py");
  EXPECT_EQ(std::string(static_cast<const char*>(code.get()), codeBytes).substr(0, 14), "def f(): pass\n");
  EXPECT_FALSE(checkpoint::writeArchive((dir / "none.pt").string(), [](std::ostream&) { return false; }, {}, nullptr));
  EXPECT_FALSE(fs::exists(dir / "none.pt"));
}

// The layout is libtorch's own: the records of an archive that libtorch's writer made,
// written again by ZipWriter in the same order, make the same bytes (libtorch 1.13's miniz;
// a newer one is only required to read them back).
TEST(ZipWriter, WritesWhatLibtorchsWriterWrites) {
  std::string big(100003, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13 % 251);
  std::string theirs, ours;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t n) {
      theirs.append(static_cast<const char*>(data), n);
      return n;
    });
    writer.writeRecord("data/0", big.data(), big.size());
    writer.writeRecord("data/1", "", 0);
    writer.writeRecord("data.pkl", "pickle", 6);
    writer.writeEndOfFile();
  }
  const zip::Fail fail = [](const std::string& what) { throw std::runtime_error(what); };
  const zip::ReadAt read = [&](std::uint64_t at, void* out, std::size_t n) { std::memcpy(out, theirs.data() + at, n); };
  zip::ZipWriter writer([&](const void* data, std::size_t n) { ours.append(static_cast<const char*>(data), n); });
  for (const zip::Entry& e : zip::readDirectory(theirs.size(), read, fail)) {
    writer.record(e.name, theirs.data() + zip::dataOffset(e, theirs.size(), read, fail), e.size);
  }
  writer.finish();
#if TORCH_VERSION_MAJOR < 2
  EXPECT_EQ(ours, theirs);
#endif
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<checkpoint::BytesReader>(ours));
  auto [data, size] = reader.getRecord("data/0");
  EXPECT_EQ(std::string(static_cast<const char*>(data.get()), size), big);
}

// Another step's .pt and .ok copied over a checkpoint's: whole and checksummed, but not the
// step its name says. Refused, so that --resume and pseval skip it rather than go on from
// (or record) the wrong step under that name.
TEST_F(Checkpoints, AnotherStepsFilesUnderACheckpointsNameAreRefused) {
  checkpoint::publish(dir.string(), sample(20));
  fs::copy_file(dir / "step-00000020.pt", dir / "step-00000060.pt");
  fs::copy_file(dir / "step-00000020.ok", dir / "step-00000060.ok");
  const auto listed = rundir::listPublished(dir.string());
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(checkpoint::read(listed[0]).step, 20);
  try {
    checkpoint::read(listed[1]);
    ADD_FAILURE() << "step 20's files read as step 60";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("holds step 20, but its name says step 60"), std::string::npos) << e.what();
  }
}
