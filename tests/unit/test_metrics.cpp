// runtime/metrics: JSON lines, progress lines, the start-up record, TensorBoard event files.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/metrics/EventFile.h"
#include "runtime/metrics/Json.h"
#include "runtime/metrics/Progress.h"
#include "runtime/metrics/Startup.h"

using namespace pstrain;

TEST(Metrics, JsonEscapesAndNulls) {
  metrics::JsonObject o;
  o.add("s", "a\"b\n").add("x", std::numeric_limits<double>::infinity()).add("n", std::int64_t(3));
  EXPECT_EQ(o.str(), R"({"s":"a\"b\n","x":null,"n":3})");
}

TEST(Metrics, ProgressLine) {
  metrics::StepProgress p;
  p.step = 50;
  p.total = 100;
  p.loss = 0.5;
  p.lr = 0.02;
  p.samplesPerSecond = 1000;
  p.elapsedSeconds = 30;
  std::string line = metrics::progressLine(p);
  EXPECT_NE(line.find("step  50/100"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 0:30"), std::string::npos) << line;
  EXPECT_EQ(metrics::formatDuration(3725), "1:02:05");
}

// run.json's start-up record: phases in the order marked, a total that is their sum, and
// the first-step hook run once per arming.
TEST(Metrics, StartupPhasesAndTheFirstStepHook) {
  metrics::Startup& startup = metrics::Startup::process();
  if (portable::processStartSeconds(::getpid())) {  // Linux and macOS
    ASSERT_FALSE(startup.phases().empty());
    EXPECT_EQ(startup.phases().front().first, "load");  // not under mpirun: no "launch"
  }
  const std::size_t before = startup.phases().size();
  startup.mark("first");
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the second phase's length
  startup.mark("second");
  int calls = 0;
  startup.afterFirstStep([&] { ++calls; });
  startup.firstStepDone();
  startup.firstStepDone();
  EXPECT_EQ(calls, 1);
  const auto phases = startup.phases();
  ASSERT_EQ(phases.size(), before + 3);
  EXPECT_EQ(phases[before].first, "first");
  EXPECT_EQ(phases[before + 1].first, "second");
  EXPECT_EQ(phases[before + 2].first, "first_step");
  EXPECT_GE(phases[before + 1].second, 0.030) << "a phase is the time from the mark before it";
  EXPECT_LT(phases[before + 1].second, 5.0);
  double sum = 0;
  for (const auto& [name, seconds] : phases) sum += seconds;
  const std::string json = startup.json();
  EXPECT_NE(json.find("\"second\":"), std::string::npos) << json;
  const double total = std::stod(json.substr(json.find("\"total\":") + 8));
  // The line carries 9 significant digits: the total agrees to its last one, however long
  // the process took to load.
  EXPECT_NEAR(total, sum, 1e-8 * std::max(1.0, sum)) << json;
  startup.afterFirstStep([&] { ++calls; });  // armed again: a new run
  startup.firstStepDone();
  EXPECT_EQ(calls, 2);
  startup.afterFirstStep(nullptr);
}

// RFC 3720 (iSCSI), appendix B.4, and the customary check value of "123456789".
TEST(Metrics, Crc32cStandardTestVectors) {
  std::string zeros(32, '\0'), ones(32, '\xff'), up(32, 0), down(32, 0);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(metrics::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(metrics::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(metrics::crc32c(up.data(), up.size()), 0x46DD794Eu);
  EXPECT_EQ(metrics::crc32c(down.data(), down.size()), 0x113FDB5Cu);
  EXPECT_EQ(metrics::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(metrics::crc32c("6789", 4, metrics::crc32c("12345", 5)), 0xE3069283u);  // continued
  const std::uint32_t crc = 0xE3069283u;
  EXPECT_EQ(metrics::maskedCrc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(Metrics, EventProtosByteForByte) {
  using namespace std::string_literals;
  // Event{wall_time: 0, file_version: "brain.Event:2"}
  EXPECT_EQ(metrics::EventFile::versionEvent(0), "\x09"s + std::string(8, '\0') + "\x1a\x0d" "brain.Event:2");
  // Event{wall_time: 1.5, step: 300, summary {value {tag: "a", simple_value: 0.5}}}
  EXPECT_EQ(metrics::EventFile::scalarEvent(1.5, 300, {{"a", 0.5}}),
            "\x09\x00\x00\x00\x00\x00\x00\xf8\x3f" "\x10\xac\x02" "\x2a\x0a" "\x0a\x08" "\x0a\x01" "a" "\x15\x00\x00\x00\x3f"s);
  const std::string framed = metrics::EventFile::record("abc");
  ASSERT_EQ(framed.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(framed.substr(0, 8), "\x03"s + std::string(7, '\0'));
  std::uint32_t lengthCrc = 0, dataCrc = 0;
  std::memcpy(&lengthCrc, framed.data() + 8, 4);  // little-endian hosts (macOS arm64, x86-64)
  std::memcpy(&dataCrc, framed.data() + 15, 4);
  EXPECT_EQ(lengthCrc, metrics::maskedCrc32c(framed.data(), 8));
  EXPECT_EQ(framed.substr(12, 3), "abc");
  EXPECT_EQ(dataCrc, metrics::maskedCrc32c("abc", 3));
}

TEST(Metrics, EventFileNameAndFirstRecord) {
  const auto dir = std::filesystem::temp_directory_path() / ("pstrain-events-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path;
  {
    metrics::EventFile events(dir.string());
    path = events.path();
    events.write(10, {{"train/loss", 1.25}});
  }
  const std::string name = std::filesystem::path(path).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find("." + std::to_string(::getpid())), std::string::npos) << name;
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string first = metrics::EventFile::record(metrics::EventFile::versionEvent(0)).substr(0, 12);
  EXPECT_EQ(bytes.substr(0, 12), first);  // the same length (wall_time is fixed-width)
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  EXPECT_NE(bytes.find("train/loss"), std::string::npos);
  EXPECT_THROW(metrics::EventFile((dir / "missing" / "sub").string()), Error);
  std::filesystem::remove_all(dir);
}
