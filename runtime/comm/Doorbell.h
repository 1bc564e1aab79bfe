#pragma once
// A wake-up hint between ranks. MPI cannot wake a rank that sleeps between two polls: its
// own waits spin a core, and a polling rank notices a message only at the end of its
// pause (up to 2 ms, twice per step: the server's last gradient bucket, the workers' new
// weights). So every rank owns a UDP socket; after posting a message that a peer may be
// sleeping on, a rank rings the peer (one 12-byte datagram: the job's token and the
// ringer's rank, to each of the peer's IPv4 addresses), and the peer's sleep ends at once.
// A hint only: a lost, late or stray datagram changes when the next poll happens, never
// what it finds. Without a socket, or for a peer whose address is unknown, rings are
// dropped and sleeps run their full pause.
// Rings are authenticated weakly, against floods and strays, not against an attacker who
// can read the network (MPI itself is unauthenticated: trusted networks only): a datagram
// without the job's random token is not a ring, a sleep reads at most kMaxDrain datagrams,
// and one that read only strays sleeps out its pause instead of listening again, so that
// a flood can neither spin a rank nor keep it from polling MPI.
// A ring carries the ringing rank, so a rank knows whose rings reach it: one that has heard
// every other rank (each rings everyone once at start-up) can sleep longer while nobody has
// posted anything to it, trusting a ring to end the sleep (see hearsEveryone()).
#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::comm {

class Doorbell {
 public:
  // Which interfaces the doorbell listens and is reached on: those MPI's TCP traffic uses
  // (Open MPI's btl_tcp_if_include / btl_tcp_if_exclude: interface names or CIDRs, comma
  // separated; empty: every interface that is up, loopback only when there is no other).
  struct Interfaces {
    std::string include, exclude;
  };
  // A UDP socket on an ephemeral port, bound to the one address of `interfaces` if there is
  // exactly one, else to every interface. `enabled` false: no socket (--doorbell off).
  explicit Doorbell(const Interfaces& interfaces = {}, bool enabled = true);
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  // Where peers ring this doorbell: "PORT ADDRESS..." (the addresses of `interfaces`);
  // empty without a socket.
  std::string address() const;
  // Every rank's address(), indexed by rank, this rank's own index (which its rings carry)
  // and the job's token (the same on every rank, random per job). An empty or malformed
  // entry leaves that rank without rings.
  void connect(const std::vector<std::string>& addresses, int self, std::uint64_t token);
  void ring(int rank);
  // Sleeps for `pause`, or until rung. Returns whether it was rung; the rings waiting are
  // consumed (one wake-up for any number of them).
  bool sleep(std::chrono::microseconds pause);
  // Whether a ring from every other rank has reached this one (as seen by sleep(); false
  // before connect()): then rings get through and a sleep may be long.
  bool hearsEveryone() const { return !heard_.empty() && unheard_ == 0; }

  // The wire form of a ring, and its reading: the ringer's rank if `bytes` is a ring of
  // the job `token` from one of `ranks` ranks, else nothing.
  static constexpr std::size_t kRingBytes = 12;
  static void encodeRing(std::uint64_t token, std::uint32_t rank, unsigned char out[kRingBytes]);
  static std::optional<std::uint32_t> parseRing(const void* bytes, std::size_t size, std::uint64_t token,
                                                std::size_t ranks);
  static constexpr int kMaxDrain = 64;  // datagrams read per sleep()
  // Whom a rank rings when it posts its part of a reduction: its parent in the binomial
  // tree rooted at `root` among `ranks` (the relative rank with its lowest set bit
  // cleared, as libnbc's binomial reduce sends); -1 for the root itself.
  static int treeParent(int rank, int root, int ranks);

 private:
  int socket_ = -1;
  int port_ = 0;
  std::vector<std::string> addresses_;           // advertised
  std::vector<std::vector<sockaddr_in>> peers_;  // by rank: where its rings go
  std::uint32_t self_ = 0;                       // what this rank's rings carry
  std::uint64_t token_ = 0;
  std::vector<bool> heard_;                      // by rank: a ring of theirs arrived (self: true)
  std::size_t unheard_ = 0;                      // how many of heard_ are false
};

}  // namespace pstrain::comm
