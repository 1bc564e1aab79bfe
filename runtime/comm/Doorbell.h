#pragma once
// A wake-up hint between ranks. MPI cannot wake a rank that sleeps between two polls: its
// own waits spin a core, and a polling rank notices a message only at the end of its
// pause (up to 2 ms, twice per step: the server's last gradient bucket, the workers' new
// weights). So every rank owns a UDP socket; after posting a message that a peer may be
// sleeping on, a rank rings the peer (one 4-byte datagram, the ringer's rank, to each of the
// peer's IPv4 addresses), and the peer's sleep ends at once.
// A hint only: a lost, late or stray datagram changes when the next poll happens, never
// what it finds. Without a socket, or for a peer whose address is unknown, rings are
// dropped and sleeps run their full pause.
// A ring carries the ringing rank, so a rank knows whose rings reach it: one that has heard
// every other rank (each rings everyone once at start-up) can sleep longer while nobody has
// posted anything to it, trusting a ring to end the sleep (see hearsEveryone()).
#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::comm {

class Doorbell {
 public:
  Doorbell();  // a UDP socket on an ephemeral port of every interface
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  // Where peers ring this doorbell: "PORT ADDRESS..." (the IPv4 addresses of the interfaces
  // that are up, loopback only when there is no other); empty without a socket.
  std::string address() const;
  // Every rank's address(), indexed by rank, and this rank's own index (which its rings
  // carry). An empty or malformed entry leaves that rank without rings.
  void connect(const std::vector<std::string>& addresses, int self);
  void ring(int rank);
  // Sleeps for `pause`, or until rung. Returns whether it was rung; the rings waiting are
  // consumed (one wake-up for any number of them).
  bool sleep(std::chrono::microseconds pause);
  // Whether a ring from every other rank has reached this one (as seen by sleep(); false
  // before connect()): then rings get through and a sleep may be long.
  bool hearsEveryone() const { return !heard_.empty() && unheard_ == 0; }

 private:
  int socket_ = -1;
  int port_ = 0;
  std::vector<std::vector<sockaddr_in>> peers_;  // by rank: where its rings go
  std::uint32_t self_ = 0;                       // what this rank's rings carry
  std::vector<bool> heard_;                      // by rank: a ring of theirs arrived (self: true)
  std::size_t unheard_ = 0;                      // how many of heard_ are false
};

}  // namespace pstrain::comm
