#pragma once
// pstrain-run's hosts: what a discovery script or a hostfile offers.
#include <string>
#include <vector>

namespace pstrain::launcher {

constexpr int kMostSlots = 1 << 16;  // per host: more is a typo, not a machine

struct Host {
  std::string name;
  int slots = 1;
};

// A discovery script's output, Horovod's convention: one "host:slots" (or "host") per
// line; blank lines and '#' comments skipped. Throws ConfigError naming the line (a host
// listed twice too: mpirun would refuse the job).
std::vector<Host> parseHostList(const std::string& text);
// An Open MPI hostfile: "host [slots=N] [...]" per line, '#' comments.
std::vector<Host> parseHostfile(const std::string& text);
// "host1:2 host2:1", as events name them.
std::string describeHosts(const std::vector<Host>& hosts);

}  // namespace pstrain::launcher
