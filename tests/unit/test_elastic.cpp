// pstrain-run's parts that need no job (launcher/elastic/): host lists, commands with a
// timeout, and its reading of pstrain's flags.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/Process.h"
#include "launcher/elastic/Hosts.h"
#include "runtime/Errors.h"

using namespace pstrain;

// pstrain-run's inputs: a discovery script's host:slots lines, an Open MPI hostfile.
TEST(Elastic, HostListsAndHostfilesParse) {
  auto hosts = launcher::parseHostList("# the Macs\nstudio:2\n\nmbp-1\nmbp-2:0\n  10.0.0.7:4  \n");
  ASSERT_EQ(hosts.size(), 3u);  // a host with 0 slots offers none
  EXPECT_EQ(launcher::describeHosts(hosts), "studio:2 mbp-1:1 10.0.0.7:4");
  EXPECT_THROW(launcher::parseHostList("studio:two\n"), ConfigError);
  EXPECT_THROW(launcher::parseHostList("a b:1\n"), ConfigError);
  auto file = launcher::parseHostfile(
      "localhost slots=3\n# comment\nmbp-1.local slots = 2 max_slots=4\nbare\nmini max_slots=8 slots=2\noff slots=0\n");
  EXPECT_EQ(launcher::describeHosts(file), "localhost:3 mbp-1.local:2 bare:1 mini:2");
}

// A discovery script's garbage and a hostfile's typos are errors that name the line, never
// an exception of another kind (which would leave mpirun without its supervisor), and
// never a name that mpirun would read as a flag or a shell would split.
TEST(Elastic, GarbageHostsAndSlotCountsAreConfigErrors) {
  for (const char* bad : {"host:99999999999\n", "host:70000\n", "host:-1\n", "--mca:1\n", "-np\n", "a;b:1\n",
                          "h\xc3\xa9:1\n", ":1\n", "host:\n", "a$(reboot):1\n"}) {
    EXPECT_THROW(launcher::parseHostList(bad), ConfigError) << bad;
  }
  for (const char* bad : {"host slots=99999999999\n", "host slots=\n", "host slots=two\n", "-host slots=1\n",
                          "h*st\n"}) {
    EXPECT_THROW(launcher::parseHostfile(bad), ConfigError) << bad;
  }
  // A host listed twice (mpirun would refuse the job, and it would be retried as a failure).
  try {
    launcher::parseHostList("studio:2\nmbp-1:1\nstudio:1\n");
    ADD_FAILURE() << "a host listed twice accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3: 'studio' again (line 1 names it too)"), std::string::npos) << e.what();
  }
  try {  // a script's terminal escape sequences are shown escaped, never sent to the terminal
    launcher::parseHostList("\x1b]0;owned\x07\x1b[2J:1\n");
    ADD_FAILURE() << "an escape sequence taken for a host";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\x1b'), std::string::npos) << what;
    EXPECT_NE(what.find("\\x1b]0;owned\\x07\\x1b[2J"), std::string::npos) << what;
  }
  try {  // the same in a hostfile
    launcher::parseHostfile("studio slots=2\n# a comment\nstudio slots=1\n");
    ADD_FAILURE() << "a host listed twice in a hostfile accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hostfile line 3: 'studio' again (line 1 names it too)"), std::string::npos)
        << e.what();
  }
  try {
    launcher::parseHostList("ok:1\nok-2.local_3:65536\nx:65537\n");
    ADD_FAILURE() << "65537 slots accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

TEST(Elastic, CommandsRunWithATimeout) {
  auto ok = process::runCommand({"sh", "-c", "echo hi; exit 3"}, std::chrono::seconds(10), true);
  EXPECT_EQ(ok.exitCode, 3);
  EXPECT_EQ(ok.output, "hi\n");
  EXPECT_FALSE(ok.timedOut);
  const auto start = std::chrono::steady_clock::now();
  auto slow = process::runCommand({"sh", "-c", "sleep 30"}, std::chrono::milliseconds(300), true);
  EXPECT_TRUE(slow.timedOut);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(process::runCommand({"/no/such/program"}, std::chrono::seconds(5), false).exitCode, 127);
  // Cancelled (pstrain-run's stop signal): the command and what it started end at once.
  const auto cancelledAt = std::chrono::steady_clock::now();
  auto cancelled = process::runCommand({"sh", "-c", "sleep 30 & sleep 30"}, std::chrono::seconds(60), true, [&] {
    return std::chrono::steady_clock::now() - cancelledAt > std::chrono::milliseconds(300);
  });
  EXPECT_TRUE(cancelled.timedOut);
  EXPECT_LT(std::chrono::steady_clock::now() - cancelledAt, std::chrono::seconds(5));
}
