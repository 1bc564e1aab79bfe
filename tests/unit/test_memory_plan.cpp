// The memory planner (training/MemoryPlan): each rank's predicted peak from what it measured
// and the run's settings, each host's against its memory, the largest model a layout trains.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/config/Flags.h"
#include "runtime/config/Mode.h"
#include "runtime/training/MemoryPlan.h"

using namespace pstrain;

namespace {

// The figures of --memory lean, unless a test gives --memory.
config::TrainConfig configOf(std::vector<std::string> flags) {
  if (std::find(flags.begin(), flags.end(), "--memory") == flags.end()) flags.insert(flags.end(), {"--memory", "lean"});
  return config::parseTrainFlags(flags).cfg;
}

constexpr double kMib = 1 << 20;
constexpr std::int64_t kParameters = 100'000'000;

training::RankMeasure measure(const std::string& host, double residentMib, double stepMib, std::int64_t held) {
  training::RankMeasure m;
  m.host = host;
  m.hostMib = 4096;
  m.residentMib = residentMib;
  m.peakMib = residentMib;
  m.stepMib = stepMib;
  m.held = held;
  return m;
}

}  // namespace

// Sync, one server, AdamW: the server adds the two moments (8 bytes a parameter) to what it
// holds as loaded; the worker adds its measured step and the buckets in flight (16 MiB).
TEST(MemoryPlan, OneServerAddsTheOptimizerTheWorkerItsStep) {
  const auto cfg = configOf({"--optimizer", "adamw"});
  const std::vector<training::RankMeasure> ranks = {measure("a", 600, -1, kParameters),
                                                    measure("a", 700, 300, kParameters)};
  const auto p = training::predictMemory(cfg, kParameters, ranks);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].role, "server");
  EXPECT_NEAR(p[0].peakMib, 600 + 8 * kParameters / kMib, 1e-6);
  EXPECT_NEAR(p[0].perParameterBytes, 12, 1e-9);
  EXPECT_EQ(p[1].role, "worker");
  EXPECT_NEAR(p[1].peakMib, 700 + 300 + 16, 1e-6);
  EXPECT_NEAR(p[1].perParameterBytes, 4, 1e-9);  // its weights: the gradient streams
}

// Clipping needs the whole gradient before any update: the server sums it (4 bytes a
// parameter more); with --servers 2 each holds its range; bf16 weights halve the worker's
// (each server converts a few parts at a time as it sends them).
TEST(MemoryPlan, ServersHoldTheirRangesAndBf16WeightsHalveTheWorkers) {
  const auto cfg = configOf({"--optimizer", "adamw", "--clip-grad-norm", "1", "--servers", "2", "--precision",
                             "bf16-weights"});
  const std::int64_t half = kParameters / 2;
  const std::vector<training::RankMeasure> ranks = {measure("a", 400, -1, half), measure("b", 400, -1, half),
                                                    measure("a", 500, 200, kParameters),
                                                    measure("b", 500, 200, kParameters)};
  const auto p = training::predictMemory(cfg, kParameters, ranks);
  // Beside the sum: lean's two slots for the one worker whose parts do not land in it.
  EXPECT_NEAR(p[0].peakMib, 400 + (8 + 4) * half / kMib + 4 * 2, 1e-6);
  EXPECT_NEAR(p[0].perParameterBytes, (4 + 8 + 4) / 2.0, 1e-9);
  EXPECT_NEAR(p[2].perParameterBytes, 2, 1e-9);
  // Each host: a server and a worker; the largest model, from the fixed part and the bytes a parameter.
  const std::string text = training::describeMemory(cfg, kParameters, ranks, training::chooseMemory(cfg, kParameters, ranks));
  EXPECT_NE(text.find("host a (ranks 0, 2)"), std::string::npos) << text;
  const double host = p[0].peakMib + p[2].peakMib, perParameter = p[0].perParameterBytes + p[2].perParameterBytes;
  const double largest = (4096 - (host - perParameter * kParameters / kMib)) * kMib / perParameter;
  EXPECT_NE(text.find(fmt::format("about {:.0f} M parameters", largest / 1e6)), std::string::npos) << text;
  EXPECT_TRUE(training::hostsThatDoNotFit(ranks, p).empty());
}

// A host whose ranks' peaks add up to more than it has is named, with its ranks.
TEST(MemoryPlan, AHostThatDoesNotFitIsNamed) {
  const auto cfg = configOf({"--optimizer", "adamw"});
  const std::vector<training::RankMeasure> ranks = {measure("small-mac", 3500, -1, kParameters),
                                                    measure("big-mac", 700, 300, kParameters)};
  const auto p = training::predictMemory(cfg, kParameters, ranks);
  const auto lines = training::hostsThatDoNotFit(ranks, p);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("host small-mac: "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("it has 4.00 GiB"), std::string::npos) << lines[0];
  const std::string text = training::describeMemory(cfg, kParameters, ranks, training::chooseMemory(cfg, kParameters, ranks));
  EXPECT_NE(text.find(fmt::format("host small-mac (ranks 0): {:.2f} GiB of its 4.00 GiB: DOES NOT FIT", p[0].peakMib / 1024)),
            std::string::npos) << text;
}

// diloco, raw floats both ways: a worker holds, beyond its measured step (whose gradient it
// gives back after the step, and from which it sends: nothing in flight beyond it), AdamW's moments (8 bytes a parameter) and the global weights
// (4); not the chain's frames, freed between exchanges; 8 more if its rounds overlap
// (--overlap-rounds auto: said, not counted). With its defaults (int4 both ways, error
// feedback on) the global weights take 2 (bfloat16) and the residual 1.0625 (int8 codes by
// blocks of 64). The server: the outer optimizer's momentum (4), the summed pseudo-gradient
// (4) and its frames (4 + 4).
TEST(MemoryPlan, DilocoWorkersHoldTheirInnerOptimizerTheGlobalWeightsAndTheResidual) {
  const auto cfg = configOf({"--mode", "diloco", "--optimizer", "adamw", "--compress", "none", "--compress-weights", "none"});
  const std::vector<training::RankMeasure> ranks = {measure("a", 600, -1, kParameters),
                                                    measure("a", 700, 300, kParameters)};
  const auto p = training::predictMemory(cfg, kParameters, ranks);
  EXPECT_NEAR(p[1].peakMib, 700 + 300 + 12 * kParameters / kMib, 1);
  EXPECT_NE(p[1].parts.find(fmt::format("{:.2f} GiB more if its rounds overlap", 8 * kParameters / kMib / 1024)),
            std::string::npos) << p[1].parts;
  const auto defaults = training::predictMemory(configOf({"--mode", "diloco", "--optimizer", "adamw"}), kParameters, ranks);
  EXPECT_NEAR(defaults[1].peakMib, 700 + 300 + 11.0625 * kParameters / kMib, 1);
  EXPECT_NEAR(p[0].peakMib, 600 + 16 * kParameters / kMib, 1);
}

// diloco over 2 servers, raw floats both ways: server 0 runs the rounds and so holds the
// whole model as loaded, but the outer momentum (4), the summed pseudo-gradient (4) and the
// frames (4 + 4) of its range only (half); with a lossy down codec (the defaults) it also
// keeps the whole copy the workers hold (4 bytes a parameter beyond its range).
TEST(MemoryPlan, DilocoServerZeroOfTwoKeepsStateForItsRangeOnly) {
  const std::vector<training::RankMeasure> ranks = {measure("a", 600, -1, kParameters), measure("b", 400, -1, kParameters / 2),
                                                    measure("a", 700, 300, kParameters), measure("b", 700, 300, kParameters)};
  const auto raw = training::predictMemory(
      configOf({"--mode", "diloco", "--servers", "2", "--compress", "none", "--compress-weights", "none"}), kParameters, ranks);
  EXPECT_NEAR(raw[0].peakMib, 600 + 16 * (kParameters / 2) / kMib, 1);
  EXPECT_NEAR(raw[1].peakMib, 400 + 16 * (kParameters / 2) / kMib, 1);
  const auto defaults = training::predictMemory(configOf({"--mode", "diloco", "--servers", "2"}), kParameters, ranks);
  EXPECT_GT(defaults[0].peakMib, defaults[1].peakMib - 400 + 600 + 4 * (kParameters / 2) / kMib - 1);
}

// --memory fast: the worker keeps its whole gradient buffer (4 bytes a parameter beyond the
// step, measured lean, and no buckets in flight), and each server of a range takes every
// worker's every part at once (4 bytes a parameter of its range per worker) instead of a
// ring of two parts per worker. AdamW without clipping updates each part on arrival: no sum.
TEST(MemoryPlan, FastKeepsTheGradientAndTakesEveryWorkersPartsAtOnce) {
  const std::int64_t half = kParameters / 2;
  const std::vector<training::RankMeasure> ranks = {measure("a", 400, -1, half), measure("b", 400, -1, half),
                                                    measure("a", 500, 200, kParameters),
                                                    measure("b", 500, 200, kParameters)};
  const auto fast = training::predictMemory(configOf({"--optimizer", "adamw", "--servers", "2", "--memory", "fast"}),
                                            kParameters, ranks);
  const double everyPart = 2 * std::ceil(half / kMib) * 4;  // 2 workers' parts of 4 MiB, each a whole slot
  EXPECT_NEAR(fast[0].peakMib, 400 + 8 * half / kMib + everyPart, 1e-6);
  EXPECT_NEAR(fast[2].peakMib, 500 + 200 + 4 * kParameters / kMib, 1e-6);
  EXPECT_NEAR(fast[2].perParameterBytes, 8, 1e-9);
  const auto lean = training::predictMemory(configOf({"--optimizer", "adamw", "--servers", "2"}), kParameters, ranks);
  EXPECT_NEAR(lean[0].peakMib, 400 + 8 * half / kMib + 4 * 2 * 2, 1e-6);
  EXPECT_NEAR(lean[2].peakMib, 500 + 200 + 16, 1e-6);
}

// --memory auto, per host: fast where the host's peak under fast before activations (what a
// start-up knows: the step is left out) is within half its memory, lean where it is over;
// the dry run's lines say which, why, and the peak under each.
TEST(MemoryPlan, AutoTakesFastWithinHalfOfAHostAndLeanOverIt) {
  const auto cfg = configOf({"--optimizer", "sgd", "--momentum", "0", "--memory", "auto"});
  const std::int64_t n = 10'000'000;  // 38 MiB of weights
  std::vector<training::RankMeasure> ranks = {measure("big", 300, -1, n), measure("big", 400, 3000, n),
                                              measure("small", 1800, 100, n)};
  const auto choices = training::chooseMemory(cfg, n, ranks);
  ASSERT_EQ(choices.size(), 2u);
  // big: 300 + 400 + 38 (the kept gradient), the measured step left out: within 2048 MiB.
  EXPECT_EQ(choices.at("big").use, config::MemoryUse::Fast) << choices.at("big").why;
  EXPECT_NE(choices.at("big").why.find("within half of its 4.00 GiB"), std::string::npos) << choices.at("big").why;
  // small: 1800 + 38 (within 2048 alone), with the server's 300 beside it: over.
  ranks[0].host = "small";
  const auto tight = training::chooseMemory(cfg, n, ranks);
  EXPECT_EQ(tight.at("small").use, config::MemoryUse::Lean);
  EXPECT_NE(tight.at("small").why.find("over half of its 4.00 GiB"), std::string::npos) << tight.at("small").why;
  const std::string text = training::describeMemory(cfg, n, ranks, tight);
  EXPECT_NE(text.find("host small: lean (--memory auto: "), std::string::npos) << text;
  EXPECT_NE(text.find("under fast, "), std::string::npos) << text;
  // Given, the flag is taken as it is.
  const auto given = training::chooseMemory(configOf({"--memory", "fast"}), n, ranks);
  EXPECT_EQ(given.at("small").use, config::MemoryUse::Fast);
  EXPECT_EQ(given.at("small").why, "--memory fast");
}

// --memory auto on a host where fast does not fit within half its memory but lean's least
// does: lean, and its ranks share what is left of that half for more in flight (each
// rank's RunPlan::leanSpareMib): a worker's buckets (up to its gradient), a server's
// receive slots (up to fast's: 4 bytes a parameter of its range per worker). The host's
// peak under lean then comes to that half. With --memory lean as given: lean's least.
TEST(MemoryPlan, AutoSparesALeanHostsRoomForMoreInFlight) {
  const auto cfg = configOf({"--optimizer", "sgd", "--momentum", "0", "--servers", "2", "--memory", "auto"});
  const std::int64_t half = kParameters / 2;
  const std::vector<training::RankMeasure> ranks = {measure("a", 800, -1, half), measure("b", 800, -1, half),
                                                    measure("a", 900, 300, kParameters),
                                                    measure("b", 900, 300, kParameters)};
  // Fast, per host: 800 + 8 * half (every part of 2 workers) + 900 + 4 * kParameters (the
  // kept gradient) = 2462 MiB, over 2048. Lean's least: 800 + 16 + 900 + 16 = 1732.
  const auto choices = training::chooseMemory(cfg, kParameters, ranks);
  const training::MemoryChoice& a = choices.at("a");
  ASSERT_EQ(a.use, config::MemoryUse::Lean) << a.why;
  const double spare = std::floor((2048 - 1732.0) / 2);
  EXPECT_EQ(a.leanSpareMib, spare);
  EXPECT_NE(a.why.find(fmt::format("each of its 2 rank(s) may keep {:.0f} MiB more in flight", spare)), std::string::npos)
      << a.why;
  const auto p = training::predictMemory(cfg, kParameters, ranks, choices);
  EXPECT_NEAR(p[0].peakMib, 800 + 16 + std::floor(spare / 4) * 4, 1e-6);  // whole slots of 4 MiB
  EXPECT_NEAR(p[2].peakMib, 900 + 300 + 16 + spare, 1e-6);
  EXPECT_LE(p[0].peakMib + p[2].peakMib - 300, 2048);  // before activations: within half
  // The dry run's peak under lean is with the spare.
  const std::string text = training::describeMemory(cfg, kParameters, ranks, choices);
  EXPECT_NE(text.find(fmt::format("{:.2f} GiB under lean)", (p[0].peakMib + p[2].peakMib) / 1024)), std::string::npos)
      << text;
  // A spare beyond what the buffers can take stops at them; a 2 M model's worker keeps at
  // most its gradient (7.6 MiB) in flight even under lean's least 16 MiB.
  config::TrainConfig spared = configOf({"--optimizer", "sgd", "--momentum", "0", "--servers", "2"});
  training::MemoryChoices wide = choices;
  for (auto& [host, c] : wide) c.leanSpareMib = 100000;
  const auto most = training::predictMemory(spared, kParameters, ranks, wide);
  EXPECT_NEAR(most[0].peakMib, 800 + 2 * std::ceil(half / kMib) * 4, 1e-6);  // fast's slots
  EXPECT_NEAR(most[2].peakMib, 900 + 300 + 4 * kParameters / kMib, 1e-6);  // the whole gradient in flight
  const std::int64_t small = 2'000'000;
  const auto oneServer = configOf({"--optimizer", "sgd", "--momentum", "0"});
  const std::vector<training::RankMeasure> pair = {measure("a", 800, -1, small), measure("a", 900, 300, small)};
  EXPECT_NEAR(training::predictMemory(oneServer, small, pair)[1].peakMib, 900 + 300 + 4 * small / kMib, 1e-6);
  // No room left under half: lean's least, said so.
  std::vector<training::RankMeasure> tight = ranks;
  tight[0].residentMib = tight[0].peakMib = 1200;
  const auto least = training::chooseMemory(cfg, kParameters, tight);
  EXPECT_EQ(least.at("a").leanSpareMib, 0);
  EXPECT_NE(least.at("a").why.find("lean's least in flight"), std::string::npos) << least.at("a").why;
  // Given, lean is lean's least.
  EXPECT_EQ(training::chooseMemory(spared, kParameters, ranks).at("a").leanSpareMib, 0);
}

namespace {

// A host's peak, every host under `use` with `leanSpareMib` each (lean).
double hostPeak(const config::TrainConfig& cfg, std::int64_t parameters, const std::vector<training::RankMeasure>& ranks,
                config::MemoryUse use, double leanSpareMib) {
  training::MemoryChoices choices;
  for (const auto& m : ranks) choices[m.host] = {use, "", leanSpareMib};
  double peak = 0;
  for (const auto& r : training::predictMemory(cfg, parameters, ranks, choices)) peak += r.peakMib;
  return peak;
}

}  // namespace

// Lean never costs more than fast, whatever the mode, codec, servers, overlap, clipping,
// precision and model size, with lean's least in flight and with any spare (up to fast's):
// the plan counts the windows and slots as the memory policy gives them, nothing twice for
// modes whose measured step already holds the whole gradient, and no slot that the server
// would not make.
TEST(MemoryPlan, LeanIsNeverAboveFastInAnyModeOrCodec) {
  int checked = 0;
  for (const config::ModeInfo& mode : config::modes()) {
    for (const std::string codec : {"none", "int8", "topk:0.01", "zlib"}) {
      for (const std::string servers : {"1", "2"}) {
        for (const std::string overlap : {"on", "off"}) {
          for (const bool clip : {false, true}) {
            for (const std::string precision : {"fp32", "bf16-weights"}) {
              std::vector<std::string> flags = {"--mode", mode.name, "--compress", codec, "--servers", servers,
                                                "--overlap", overlap, "--precision", precision, "--optimizer", "adamw"};
              if (clip) flags.insert(flags.end(), {"--clip-grad-norm", "1"});
              config::TrainConfig cfg;
              try {
                cfg = configOf(flags);
              } catch (const std::exception&) {
                continue;  // a combination the flags refuse
              }
              for (const std::int64_t n : {std::int64_t(300'000), kParameters}) {
                const int k = std::stoi(servers);
                std::vector<training::RankMeasure> ranks;
                for (int s = 0; s < k && !mode.peers(); ++s) ranks.push_back(measure("a", 400, -1, k == 1 ? n : n / k));
                for (int w = 0; w < 3; ++w) ranks.push_back(measure("a", 500, 200, n));
                const double fast = hostPeak(cfg, n, ranks, config::MemoryUse::Fast, 0);
                for (const double spare : {0.0, 10.0, 1e6}) {
                  EXPECT_LE(hostPeak(cfg, n, ranks, config::MemoryUse::Lean, spare), fast + 1e-6)
                      << fmt::format("{} with {} parameters, spare {} MiB", fmt::join(flags, " "), n, spare);
                }
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}
