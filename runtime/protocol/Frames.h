#pragma once
// The frame layer: how each of a step's two messages (StepMessages) travels as bytes. One
// implementation per direction and coding, chosen once (makeUpFrame, makeDownFrame), so that
// StepLink writes each exchange once over them (gloo's way: the algorithm once, over
// swappable pieces):
//   raw, the identity coding: a message is its own floats, sent and received in place (no
//        copy), and MPI can sum raw up messages itself; the server's down message to
//        workers with bfloat16 weights is its float32 weights converted (a copy);
//   coded (--compress, --compress-weights): the gradient or the weights as a codec frame
//        (runtime/codec), then the rest of the message raw (buffers, trailer, header,
//        shares: small, and read by the protocol):
//          up:   [gradient frame][buffers + trailer]
//          down: [header][buffers and shares][weights frame]
#include <cstddef>
#include <memory>
#include <string>

#include "models/Registry.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/protocol/StepMessages.h"

namespace pstrain::protocol {

// A run of bytes to send, or where to receive some.
struct Bytes {
  char* data = nullptr;
  std::size_t size = 0;
};

class UpFrame {
 public:
  virtual ~UpFrame() = default;
  // Whether up messages can be summed as they are (by MPI, in place).
  virtual bool summable() const = 0;
  // This rank's up message as it travels; valid until the next call. `weightsDecodeSeconds`:
  // what decoding the weights cost since the last up message (the trailer reports it).
  virtual Bytes encode(double weightsDecodeSeconds) = 0;
  // A payload from encode() on another rank, decoded and added into `up`.
  virtual void addTo(const char* payload, std::size_t size, float* up) = 0;
  // Seconds spent encoding and decoding since the last call.
  virtual double takeCodecSeconds() = 0;
};

class DownFrame {
 public:
  virtual ~DownFrame() = default;
  // Whether every down message has the same size (receivers need not be told it).
  virtual bool fixedSize() const = 0;
  // Encodes messages.down as it is now: what packed() returns until the next call.
  virtual void pack() = 0;
  virtual Bytes packed() = 0;
  // Where a down message of `size` bytes (or of at most that many: receive()) is received.
  virtual Bytes inbox(std::size_t size) = 0;
  // The `size` bytes received at `received` (from inbox()), decoded into messages.down.
  virtual void accept(const char* received, std::size_t size) = 0;
  // Seconds spent decoding weights since the last call (the next up message reports them),
  // and all codec seconds since the last takeCodecSeconds().
  virtual double takeDecodeSeconds() = 0;
  virtual double takeCodecSeconds() = 0;
};

// cfg's codings (--compress, --compress-weights) of `messages` for `model`'s tensors; `seed`
// seeds this rank's encoder (randomk's choices, powersgd's first Q).
std::unique_ptr<UpFrame> makeUpFrame(const config::TrainConfig& cfg, const models::Net& model, StepMessages& messages,
                                     std::uint64_t seed);
std::unique_ptr<DownFrame> makeDownFrame(const config::TrainConfig& cfg, const models::Net& model,
                                         StepMessages& messages, std::uint64_t seed);

}  // namespace pstrain::protocol
