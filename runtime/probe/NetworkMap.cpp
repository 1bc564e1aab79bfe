#include "runtime/probe/NetworkMap.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>

#include "runtime/Errors.h"
#include "runtime/net/Interfaces.h"
#include "runtime/net/LinkTimer.h"
#include "runtime/protocol/Handshake.h"

namespace pstrain::probe {
namespace {

constexpr const char* kPortOf = "port ";  // the fact of rank 0's listening port on an address

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
  // Every rank's host and interfaces; rank 0's listening port on each of its addresses, and
  // the token that the timed transfers start with (LinkTimer.h), over MPI.
  protocol::Facts facts = {{"host", comm.hostName()}, {"interfaces", net::describe(mine)}};
  std::map<std::string, std::unique_ptr<net::LinkListener>> listeners;
  if (comm.rank() == 0) {
    const net::LinkToken token = net::randomLinkToken();
    facts.emplace_back("token", std::string(token.begin(), token.end()));
    for (const auto& i : mine) {
      auto listener = std::make_unique<net::LinkListener>(i.address);
      if (listener->port() > 0) facts.emplace_back(kPortOf + net::dotted(i.address), std::to_string(listener->port()));
      listeners[net::dotted(i.address)] = std::move(listener);
    }
  }
  std::vector<std::map<std::string, std::string>> all;
  const auto encoded = comm.allGather(protocol::encodeFacts(facts), "probe: network map");
  for (std::size_t r = 0; r < encoded.size(); ++r) all.push_back(protocol::decodeFacts(encoded[r], static_cast<int>(r)));
  net::LinkToken token{};
  const std::string& said = all[0]["token"];
  if (said.size() != token.size()) throw CommError("probe: network map: rank 0 sent no transfer token");
  std::copy(said.begin(), said.end(), token.begin());
  std::map<std::string, int> portOf;
  for (const auto& [key, value] : all[0]) {
    if (key.rfind(kPortOf, 0) == 0) portOf[key.substr(std::strlen(kPortOf))] = std::stoi(value);
  }
  std::vector<WorkerNetwork> workers;
  auto hostOf = [&](int r) { return all[static_cast<std::size_t>(r)]["host"]; };
  auto interfacesOf = [&](int r) { return net::parseDescription(all[static_cast<std::size_t>(r)]["interfaces"]); };
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
        if (portOf.count(s.serverAddress)) listeners[s.serverAddress]->receiveOne(token, timeout + std::chrono::seconds(2));
      } else {
        const auto port = portOf.find(s.serverAddress);
        in_addr from{}, to{};
        if (port != portOf.end() && net::parseAddress(s.workerAddress, from) && net::parseAddress(s.serverAddress, to)) {
          s.bytesPerSecond = net::timeSend(from, to, port->second, token, bytes, timeout);
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
