#include "runtime/net/Interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#if defined(__APPLE__)
#include <net/if_media.h>
#include <net/if_types.h>
#include <sys/ioctl.h>
#include <unistd.h>
#endif

namespace pstrain::net {
namespace {

// What the OS says of link `name`'s kind and rate.
struct LinkFacts {
  std::string kind;
  double megabitsPerSecond = 0;
};

#if defined(__linux__)
LinkFacts linkFacts(const std::string& name, const ifaddrs*) {
  const std::string sys = "/sys/class/net/" + name;
  auto exists = [](const std::string& path) { return std::ifstream(path).good(); };
  LinkFacts facts;
  if (exists(sys + "/wireless/") || exists(sys + "/phy80211/name")) {
    facts.kind = "wifi";
  } else if (name.rfind("thunderbolt", 0) == 0) {
    facts.kind = "thunderbolt";
  } else if (exists(sys + "/bridge/bridge_id")) {
    facts.kind = "bridge";
  } else {
    int type = 0;
    std::ifstream(sys + "/type") >> type;
    if (type == 1) facts.kind = "ethernet";  // ARPHRD_ETHER
  }
  long speed = 0;  // Mbit/s; -1 or unreadable when the driver does not say
  if (std::ifstream(sys + "/speed") >> speed && speed > 0) facts.megabitsPerSecond = static_cast<double>(speed);
  return facts;
}
#elif defined(__APPLE__)
// The link-layer entry of `name` in `all` (AF_LINK, whose ifa_data is an if_data) and the
// interface's media (SIOCGIFMEDIA): Wi-Fi is IFM_IEEE80211, Ethernet IFM_ETHER; macOS's
// Thunderbolt Bridge is a bridge interface (bridge0) over the Thunderbolt ports.
LinkFacts linkFacts(const std::string& name, const ifaddrs* all) {
  LinkFacts facts;
  for (const ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_LINK || name != i->ifa_name || !i->ifa_data) continue;
    const auto* data = static_cast<const if_data*>(i->ifa_data);
    if (data->ifi_baudrate > 0) facts.megabitsPerSecond = static_cast<double>(data->ifi_baudrate) / 1e6;
    if (data->ifi_type == IFT_BRIDGE) facts.kind = "thunderbolt";
  }
  if (!facts.kind.empty()) return facts;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return facts;
  ifmediareq media{};
  std::snprintf(media.ifm_name, sizeof media.ifm_name, "%s", name.c_str());
  if (::ioctl(fd, SIOCGIFMEDIA, &media) == 0) {
    if (IFM_TYPE(media.ifm_active) == IFM_IEEE80211) facts.kind = "wifi";
    if (IFM_TYPE(media.ifm_active) == IFM_ETHER) facts.kind = "ethernet";
  }
  ::close(fd);
  return facts;
}
#else
LinkFacts linkFacts(const std::string&, const ifaddrs*) { return {}; }
#endif

}  // namespace

std::vector<Interface> localInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  std::map<std::string, LinkFacts> facts;  // per interface, asked once
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    Interface one;
    one.name = i->ifa_name;
    one.address = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
    if (i->ifa_netmask) one.netmask = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr;
    one.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    if (one.loopback) {
      one.kind = "loopback";
    } else {
      if (!facts.count(one.name)) facts[one.name] = linkFacts(one.name, list);
      one.kind = facts[one.name].kind;
      one.megabitsPerSecond = facts[one.name].megabitsPerSecond;
    }
    out.push_back(one);
  }
  ::freeifaddrs(list);
  return out;
}

std::string dotted(in_addr address) {
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &address, text, sizeof text);
  return text;
}

bool parseAddress(const std::string& text, in_addr& out) { return ::inet_pton(AF_INET, text.c_str(), &out) == 1; }

std::string subnetOf(in_addr address, in_addr netmask) {
  const std::uint32_t mask = ntohl(netmask.s_addr);
  int bits = 0;
  while (bits < 32 && (mask & (0x80000000u >> bits))) ++bits;
  in_addr network{};
  network.s_addr = address.s_addr & netmask.s_addr;
  return dotted(network) + "/" + std::to_string(bits);
}

std::vector<std::string> splitList(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

bool matches(const std::vector<std::string>& items, const std::string& name, in_addr address) {
  for (const auto& item : items) {
    const auto slash = item.find('/');
    if (slash == std::string::npos) {
      if (item == name) return true;
      continue;
    }
    in_addr network{};
    const int bits = std::atoi(item.c_str() + slash + 1);
    if (::inet_pton(AF_INET, item.substr(0, slash).c_str(), &network) != 1 || bits < 0 || bits > 32) continue;
    const std::uint32_t mask = bits == 0 ? 0 : htonl(~std::uint32_t(0) << (32 - bits));
    if ((address.s_addr & mask) == (network.s_addr & mask)) return true;
  }
  return false;
}

std::string describe(const std::vector<Interface>& interfaces) {
  std::string out;
  for (const Interface& i : interfaces) {
    const std::string subnet = subnetOf(i.address, i.netmask);
    out += i.name + " " + dotted(i.address) + subnet.substr(subnet.find('/')) + " " + (i.kind.empty() ? "-" : i.kind) +
           " " + std::to_string(static_cast<long long>(i.megabitsPerSecond)) + "\n";
  }
  return out;
}

std::vector<Interface> parseDescription(const std::string& text) {
  std::vector<Interface> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    Interface i;
    std::string cidr;
    double mbps = 0;
    if (!(fields >> i.name >> cidr >> i.kind >> mbps)) continue;
    const auto slash = cidr.find('/');
    const int bits = slash == std::string::npos ? -1 : std::atoi(cidr.c_str() + slash + 1);
    if (bits < 0 || bits > 32 || ::inet_pton(AF_INET, cidr.substr(0, slash).c_str(), &i.address) != 1) continue;
    i.netmask.s_addr = bits == 0 ? 0 : htonl(~std::uint32_t(0) << (32 - bits));
    if (i.kind == "-") i.kind.clear();
    i.loopback = i.kind == "loopback";
    i.megabitsPerSecond = mbps;
    out.push_back(i);
  }
  return out;
}

}  // namespace pstrain::net
