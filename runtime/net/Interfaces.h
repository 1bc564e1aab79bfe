#pragma once
// This host's IPv4 interfaces and the subnets they put it on: what the doorbell binds and
// what the probe's network map compares between hosts. Torch-free.
#include <netinet/in.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::net {

// An interface address that is up, with its network's mask, and what the OS says the link
// is: `kind` "wifi", "ethernet", "thunderbolt" (Linux's thunderbolt* interfaces; macOS's
// bridge0, the Thunderbolt Bridge), "bridge", "loopback" or "" (unknown); `megabitsPerSecond`
// the link's nominal rate (Linux: /sys/class/net/NAME/speed; macOS: if_data's baud rate),
// 0 when unknown.
struct Interface {
  std::string name;
  in_addr address{}, netmask{};
  std::string kind;
  double megabitsPerSecond = 0;
  bool loopback = false;
};

// Every IPv4 interface address that is up (getifaddrs), loopback included.
std::vector<Interface> localInterfaces();

// "198.18.77.0/24": the subnet of `address` under `netmask`.
std::string subnetOf(in_addr address, in_addr netmask);
// "198.18.77.2", and its reading (false when `text` is not a dotted IPv4 address).
std::string dotted(in_addr address);
bool parseAddress(const std::string& text, in_addr& out);

// Items of a comma-separated list, trimmed, empties dropped ("a, b,,c" -> a b c).
std::vector<std::string> splitList(const std::string& list);

// Whether interface `name` with `address` is one of `items`: names or CIDRs
// ("192.168.1.0/24"), as Open MPI's btl_tcp_if_include reads them.
bool matches(const std::vector<std::string>& items, const std::string& name, in_addr address);

// One line per interface address, "NAME ADDRESS/BITS KIND MBPS" (KIND "-" when unknown),
// and its reading: how ranks tell each other their interfaces. Lines that do not parse are
// skipped.
std::string describe(const std::vector<Interface>& interfaces);
std::vector<Interface> parseDescription(const std::string& text);

}  // namespace pstrain::net
