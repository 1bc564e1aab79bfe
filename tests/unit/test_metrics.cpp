// runtime/metrics: JSON lines, progress lines, the start-up record.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <limits>
#include <string>

#include "runtime/Portable.h"
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
  double sum = 0;
  for (const auto& [name, seconds] : phases) {
    EXPECT_GE(seconds, 0) << name;
    sum += seconds;
  }
  const std::string json = startup.json();
  EXPECT_NE(json.find("\"second\":"), std::string::npos) << json;
  const double total = std::stod(json.substr(json.find("\"total\":") + 8));
  EXPECT_NEAR(total, sum, 1e-9) << json;
  startup.afterFirstStep([&] { ++calls; });  // armed again: a new run
  startup.firstStepDone();
  EXPECT_EQ(calls, 2);
  startup.afterFirstStep(nullptr);
}
