#include "runtime/probe/NetworkMap.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <sstream>

#include "runtime/net/Interfaces.h"
#include "runtime/net/LinkTimer.h"

namespace pstrain::probe {
namespace {

std::vector<net::Interface> external(const std::vector<net::Interface>& all) {
  std::vector<net::Interface> out;
  for (const auto& i : all) {
    if (!i.loopback) out.push_back(i);
  }
  return out;
}

}  // namespace

WorkerNetwork sharedWith(const std::string& serverHost, const std::vector<net::Interface>& server,
                         const std::string& workerHost, const std::vector<net::Interface>& worker) {
  WorkerNetwork out;
  for (const auto& w : worker) {
    for (const auto& s : server) {
      if (s.address.s_addr == w.address.s_addr && serverHost == workerHost) out.sameHostAsServer = true;
    }
  }
  for (const auto& w : worker) {
    const std::string subnet = net::subnetOf(w.address, w.netmask);
    const bool seen = std::any_of(out.subnets.begin(), out.subnets.end(),
                                  [&](const SharedSubnet& s) { return s.subnet == subnet; });
    for (const auto& s : server) {
      if (seen || net::subnetOf(s.address, s.netmask) != subnet) continue;
      if (s.address.s_addr == w.address.s_addr && !out.sameHostAsServer) break;  // one address, two networks
      out.subnets.push_back(SharedSubnet{subnet, w.kind, w.megabitsPerSecond, net::dotted(s.address),
                                         net::dotted(w.address), 0});
      break;
    }
  }
  return out;
}

std::vector<WorkerNetwork> mapNetwork(comm::Communicator& comm, std::size_t bytes, double seconds) {
  const std::vector<net::Interface> mine = external(net::localInterfaces());
  // Rank 0 listens on each of its addresses; the workers learn the ports with the map.
  std::map<std::string, std::unique_ptr<net::LinkListener>> listeners;
  std::string ports;
  if (comm.rank() == 0) {
    for (const auto& i : mine) {
      auto listener = std::make_unique<net::LinkListener>(i.address);
      if (listener->port() > 0) ports += net::dotted(i.address) + " " + std::to_string(listener->port()) + "\n";
      listeners[net::dotted(i.address)] = std::move(listener);
    }
  }
  const auto described = comm.allGather(comm.hostName() + "\n" + net::describe(mine), "probe: network map");
  std::map<std::string, int> portOf;
  {
    std::istringstream lines(comm.allGather(ports, "probe: network map (ports)")[0]);
    std::string address;
    for (int port; lines >> address >> port;) portOf[address] = port;
  }
  std::vector<WorkerNetwork> workers;
  auto hostOf = [&](int r) {
    const std::string& text = described[static_cast<std::size_t>(r)];
    return text.substr(0, text.find('\n'));
  };
  auto interfacesOf = [&](int r) {
    const std::string& text = described[static_cast<std::size_t>(r)];
    return net::parseDescription(text.substr(text.find('\n') + 1));
  };
  for (int r = 1; r < comm.size(); ++r) {
    WorkerNetwork w = sharedWith(hostOf(0), interfacesOf(0), hostOf(r), interfacesOf(r));
    w.rank = r;
    w.host = hostOf(r);
    workers.push_back(w);
  }
  // Each worker on another host in turn, one subnet at a time, so that no two transfers share a link.
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
  std::string rates;
  for (auto& w : workers) {
    comm.barrier("probe: network map (links)");
    if (w.sameHostAsServer || (comm.rank() != 0 && comm.rank() != w.rank)) continue;
    for (auto& s : w.subnets) {
      if (comm.rank() == 0) {
        if (portOf.count(s.serverAddress)) listeners[s.serverAddress]->receiveOne(timeout + std::chrono::seconds(2));
      } else {
        const auto port = portOf.find(s.serverAddress);
        in_addr from{}, to{};
        if (port != portOf.end() && net::parseAddress(s.workerAddress, from) && net::parseAddress(s.serverAddress, to)) {
          s.bytesPerSecond = net::timeSend(from, to, port->second, bytes, timeout);
        }
        rates += std::to_string(s.bytesPerSecond) + " ";
      }
    }
  }
  const auto measured = comm.gather(rates, 0, "probe: network map (rates)");
  if (comm.rank() != 0) return {};
  for (auto& w : workers) {
    std::istringstream in(measured[static_cast<std::size_t>(w.rank)]);
    for (auto& s : w.subnets) {
      if (!w.sameHostAsServer) in >> s.bytesPerSecond;
    }
  }
  return workers;
}

FastestSubnet fastestCommonSubnet(const std::vector<WorkerNetwork>& workers) {
  std::map<std::string, double> slowest;  // subnet -> its slowest worker's rate, over the subnets all share
  std::map<std::string, int> sharing;
  int remote = 0;
  for (const auto& w : workers) {
    if (w.sameHostAsServer) continue;
    ++remote;
    for (const auto& s : w.subnets) {
      slowest[s.subnet] = sharing[s.subnet]++ ? std::min(slowest[s.subnet], s.bytesPerSecond) : s.bytesPerSecond;
    }
  }
  FastestSubnet best;
  for (const auto& [subnet, rate] : slowest) {
    if (sharing[subnet] == remote && rate > best.bytesPerSecond) best = FastestSubnet{subnet, rate};
  }
  return best;
}

std::vector<std::string> addressesOn(const std::vector<WorkerNetwork>& workers, const std::string& subnet) {
  std::vector<std::string> out;
  for (const auto& w : workers) {
    for (const auto& s : w.subnets) {
      if (s.subnet != subnet) continue;
      for (const std::string& a : {s.serverAddress, s.workerAddress}) {
        if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
      }
    }
  }
  return out;
}

}  // namespace pstrain::probe
