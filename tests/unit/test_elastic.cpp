// pstrain-run's parts that need no job (launcher/Elastic): host lists, commands with a
// timeout, and its reading of pstrain's flags.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/Elastic.h"
#include "runtime/Errors.h"

using namespace pstrain;

// pstrain-run's inputs: a discovery script's host:slots lines, an Open MPI hostfile.
TEST(Elastic, HostListsAndHostfilesParse) {
  auto hosts = launcher::parseHostList("# the Macs\nstudio:2\n\nmbp-1\nmbp-2:0\n  10.0.0.7:4  \n");
  ASSERT_EQ(hosts.size(), 3u);  // a host with 0 slots offers none
  EXPECT_EQ(launcher::describeHosts(hosts), "studio:2 mbp-1:1 10.0.0.7:4");
  EXPECT_THROW(launcher::parseHostList("studio:two\n"), ConfigError);
  EXPECT_THROW(launcher::parseHostList("a b:1\n"), ConfigError);
  auto file = launcher::parseHostfile("localhost slots=3\n# comment\nmbp-1.local slots = 2 max_slots=4\nbare\n");
  EXPECT_EQ(launcher::describeHosts(file), "localhost:3 mbp-1.local:2 bare:1");
}

TEST(Elastic, CommandsRunWithATimeout) {
  auto ok = launcher::runCommand({"sh", "-c", "echo hi; exit 3"}, std::chrono::seconds(10), true);
  EXPECT_EQ(ok.exitCode, 3);
  EXPECT_EQ(ok.output, "hi\n");
  EXPECT_FALSE(ok.timedOut);
  const auto start = std::chrono::steady_clock::now();
  auto slow = launcher::runCommand({"sh", "-c", "sleep 30"}, std::chrono::milliseconds(300), true);
  EXPECT_TRUE(slow.timedOut);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(launcher::runCommand({"/no/such/program"}, std::chrono::seconds(5), false).exitCode, 127);
}
