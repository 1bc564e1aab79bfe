#pragma once
// A wake-up hint between ranks. MPI cannot wake a rank that sleeps between two polls: its
// own waits spin a core, and a polling rank notices a message only at the end of its
// pause (up to 2 ms, twice per step: the server's last gradient bucket, the workers' new
// weights). So every rank owns a UDP socket; after posting a message that a peer may be
// sleeping on, a rank rings the peer (one 20-byte datagram to each of the peer's IPv4
// addresses), and the peer's sleep ends at once. A hint only: a lost, late or stray
// datagram changes when the next poll happens, never what it finds. Without a socket, or
// for a peer whose address is unknown, rings are dropped and sleeps run their full pause.
// A ring is the ringer's rank, a counter that each ring increases and a MAC of both and of
// the rank rung (SipHash-2-4, keyed by the job's random 128-bit key, which MPI hands out at
// start-up and never goes on the wire): a forged datagram fails the MAC, a captured one
// replayed to its rank carries a counter already seen, sent to another rank it fails the
// MAC, and none of them wakes a rank. (MPI's own traffic is not
// authenticated: trusted networks only; the doorbell just adds no way in.) A sleep reads
// at most kMaxDrain datagrams, and one that read only strays sleeps out its pause instead
// of listening again, so that a flood can neither spin a rank nor keep it from polling MPI.
// The sockets listen only where peers ring: one per selected interface address, or the
// loopback alone for a job whose ranks share one host.
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
  // UDP sockets on one ephemeral port, one bound to each address of `interfaces` (never
  // the wildcard address), or to 127.0.0.1 alone when `oneHost` (every rank on this host).
  // `enabled` false: no socket (--doorbell off).
  explicit Doorbell(const Interfaces& interfaces = {}, bool enabled = true, bool oneHost = false);
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  // The job's MAC key: the same on every rank, random per job.
  struct Key {
    std::uint64_t k0 = 0, k1 = 0;
  };

  // Where peers ring this doorbell: "PORT ADDRESS..." (the addresses its sockets are bound
  // to); empty without a socket.
  std::string address() const;
  // Every rank's address(), indexed by rank, this rank's own index (which its rings carry)
  // and the job's key. An empty or malformed entry leaves that rank without rings.
  void connect(const std::vector<std::string>& addresses, int self, const Key& key);
  void ring(int rank);
  // Sleeps for `pause`, or until rung. Returns whether it was rung; the rings waiting are
  // consumed (one wake-up for any number of them).
  bool sleep(std::chrono::microseconds pause);
  // Whether a ring from every other rank has reached this one (as seen by sleep(); false
  // before connect()): then rings get through and a sleep may be long.
  bool hearsEveryone() const { return !lastCounter_.empty() && unheard_ == 0; }

  // The wire form of a ring to rank `to` (rank, counter, MAC of rank, `to` and counter:
  // big-endian; `to` is not sent, the receiver puts in its own), and its reading by rank
  // `to`: the ringer's rank and counter if `bytes` is a ring for `to` with a valid MAC under
  // `key` from one of `ranks` ranks, else nothing. Whether the counter is new is the
  // receiver's to judge.
  struct Ring {
    std::uint32_t rank = 0;
    std::uint64_t counter = 0;
  };
  static constexpr std::size_t kRingBytes = 20;
  static void encodeRing(const Key& key, const Ring& ring, std::uint32_t to, unsigned char out[kRingBytes]);
  static std::optional<Ring> parseRing(const void* bytes, std::size_t size, const Key& key, std::size_t ranks,
                                       std::uint32_t to);
  // SipHash-2-4 (Aumasson and Bernstein) of `size` bytes under the key (k0, k1): the MAC.
  static std::uint64_t sipHash24(const Key& key, const unsigned char* bytes, std::size_t size);
  static constexpr int kMaxDrain = 64;  // datagrams read per sleep()
  // Whom a rank rings when it posts its part of a reduction: its parent in the binomial
  // tree rooted at `root` among `ranks` (the relative rank with its lowest set bit
  // cleared, as libnbc's binomial reduce sends); -1 for the root itself.
  static int treeParent(int rank, int root, int ranks);

 private:
  // A bound socket, and the network it serves (rings to that network leave through it).
  struct Socket {
    int fd = -1;
    in_addr address{}, netmask{};
  };
  const Socket& socketFor(const sockaddr_in& to) const;

  std::vector<Socket> sockets_;                  // all on port_
  int port_ = 0;
  std::vector<std::vector<sockaddr_in>> peers_;  // by rank: where its rings go
  std::uint32_t self_ = 0;                       // what this rank's rings carry
  std::uint64_t counter_ = 0;                    // of the last ring sent
  Key key_;
  std::vector<std::uint64_t> lastCounter_;       // by rank: the newest ring accepted (0: none yet)
  std::size_t unheard_ = 0;                      // other ranks whose lastCounter_ is still 0
};

}  // namespace pstrain::comm
