#pragma once
// The probe's map of the network (pstrain --probe): every rank lists its IPv4 interfaces,
// and each worker on another host than rank 0 times, with TCP transfers of pstrain's own,
// every subnet the two hosts share. MPI's TCP transport stripes over every interface that
// reaches a peer unless told otherwise (--mca btl_tcp_if_include), so a slow Wi-Fi path
// can drag a Thunderbolt bridge down: the map shows which subnet is the fastest, and the
// option that gives MPI that one alone. Torch-free.
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/comm/Communicator.h"
#include "runtime/net/Interfaces.h"

namespace pstrain::probe {

// A subnet that rank 0 and a worker share, as timed between them.
struct SharedSubnet {
  std::string subnet;         // "198.18.78.0/24"
  std::string kind;           // the worker's interface: "wifi", "ethernet", "thunderbolt", ... ("" unknown)
  double megabitsPerSecond = 0;  // its nominal rate, where the OS says (0 unknown)
  std::string serverAddress, workerAddress;
  double bytesPerSecond = 0;  // 0: nothing came through within the time
};

struct WorkerNetwork {
  int rank = 0;
  std::string host;
  bool sameHostAsServer = false;  // an address in common with rank 0: MPI uses shared memory
  std::vector<SharedSubnet> subnets;
};

// What rank 0 (`serverHost`, its external interfaces) and a worker share: one entry per
// subnet, with rank 0's first address on it; not yet timed. The same host: the same name and
// an address in common (two hosts of one name are test hosts or clones). Two hosts can hold
// the same private address on a network each has to itself (Docker's 172.17.0.1): such a
// subnet joins nothing and is left out.
WorkerNetwork sharedWith(const std::string& serverHost, const std::vector<net::Interface>& server,
                         const std::string& workerHost, const std::vector<net::Interface>& worker);

// Collective over every rank of `comm`. Each worker in turn times each subnet it shares with
// rank 0: `bytes` from the worker to rank 0, at most `seconds` per subnet, only to the
// addresses rank 0 listens on. Returns every worker's map on rank 0 (empty elsewhere).
std::vector<WorkerNetwork> mapNetwork(comm::Communicator& comm, std::size_t bytes, double seconds);

// The subnet every worker on another host shares with rank 0 whose slowest worker is the
// fastest, and that slowest rate; "" when there is no such worker or subnet.
struct FastestSubnet {
  std::string subnet;
  double bytesPerSecond = 0;
};
FastestSubnet fastestCommonSubnet(const std::vector<WorkerNetwork>& workers);

// The hosts' addresses on `subnet`, rank 0's first, each once: the hostfile's for that path.
std::vector<std::string> addressesOn(const std::vector<WorkerNetwork>& workers, const std::string& subnet);

}  // namespace pstrain::probe
