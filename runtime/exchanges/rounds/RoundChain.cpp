#include "runtime/exchanges/rounds/RoundChain.h"

#include <c10/util/BFloat16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/metrics/Clock.h"

namespace pstrain::exchanges::rounds {

namespace {

using metrics::Clock;
using metrics::secondsSince;

// Floats per chunk: small enough that a chunk moves on while the next travels (a quarter
// MiB raw, 36 KiB in int4), large enough that a model of a billion parameters is a few
// thousand messages a round.
constexpr std::int64_t kChunkFloats = std::int64_t(1) << 16;
constexpr int kUpTag = comm::Communicator::kFirstFreeTag, kDownTag = comm::Communicator::kFirstFreeTag + 1;
// The down message's first float: what its chunks carry (kHeld: none, the workers hold the
// weights already).
constexpr float kWholeWeights = 0, kUpdate = 1, kHeld = 2;

// A chunk of the weights: its floats, and the server that owns it.
struct Chunk {
  std::int64_t offset = 0, length = 0;
  int owner = 0;
};

// Each server's range cut into chunks of at most kChunkFloats, in order.
std::vector<Chunk> chunksOf(const std::vector<std::int64_t>& serverEnds) {
  std::vector<Chunk> chunks;
  std::int64_t begin = 0;
  for (std::size_t k = 0; k < serverEnds.size(); ++k) {
    for (std::int64_t at = begin; at < serverEnds[k]; at += kChunkFloats) {
      chunks.push_back({at, std::min(kChunkFloats, serverEnds[k] - at), static_cast<int>(k)});
    }
    begin = serverEnds[k];
  }
  return chunks;
}

// One message of an exchange: its bytes (to send, or where one is received: in its
// direction's block) and its request.
struct Message {
  char* bytes = nullptr;
  std::size_t capacity = 0, size = 0;  // size: sent, or received
  std::size_t request = 0;
  bool posted = false, done = false;
};

// One direction's messages of an exchange, their bytes cut from one block allocated as the
// exchange starts and freed at its end: a model's thousands of chunk frames do not scatter
// over the heap that training reuses (they once left a relaying worker 170 MiB of it for a
// 120 M GPT), and a block past malloc's mmap threshold goes back to the system whole. Pages
// of the block that nothing writes (a receive's unused room) take no memory.
struct Messages {
  std::vector<Message> list;
  std::unique_ptr<char[]> block;
  std::size_t blockBytes = 0, used = 0;

  // `count` messages, none posted, with `bytes` of room for all of them.
  void reset(std::size_t count, std::size_t bytes) {
    list.assign(count, Message());
    block.reset(bytes ? new char[bytes] : nullptr);
    blockBytes = bytes;
    used = 0;
  }
  // Message `i` gets `capacity` bytes of the block.
  Message& place(std::size_t i, std::size_t capacity) {
    if (used + capacity > blockBytes) throw InternalError("RoundChain: a message past its block");
    Message& m = list[i];
    m.bytes = block.get() + used;
    m.capacity = capacity;
    used += capacity;
    return m;
  }
  Message& operator[](std::size_t i) { return list[i]; }
  void clear() { reset(0, 0); }
};

}  // namespace

struct RoundChain::Impl {
  comm::Communicator& comm;
  // The chain: last, last - 1, ..., first, then each chunk's owner, up; down the other way.
  const int rank, servers, first, last;
  const std::vector<Chunk> table;
  const std::int64_t upFixed, downFixed, chunks;
  std::vector<std::int64_t> handled;  // the chunks this rank codes (a server: its own; a worker: all)
  std::int64_t base = 0;           // where this rank's floats begin (a server holds its range only)
  Codecs codecs;
  bool lossyDown;
  std::vector<std::unique_ptr<codec::ErrorFeedbackEncoder>> upEncoders;  // workers, by chunk
  std::vector<std::unique_ptr<codec::Codec>> upDecoders, wholeCodecs, updateCodecs;  // by chunk (servers: their own)
  std::vector<float> scratch;  // a chunk's decoded floats

  // The exchange in flight.
  enum class Role { None, Worker, ServerUp, ServerDown } role = Role::None;
  std::string context;
  const float* delta = nullptr;
  const float* fixed = nullptr;
  float* deltaOut = nullptr;  // the server's up sum
  float* fixedOut = nullptr;
  GlobalCopy global;  // a worker's copy of the weights
  Messages upIn, upOut, downIn, downOut;  // chunks, then (up) the fixed part last / (down) first
  std::vector<std::int64_t> upOrder;     // the up messages this rank takes in, in order
  std::size_t nextUp = 0, nextDown = 0;  // the next of upOrder, and of the down message, to take in
  bool upActive = false;                 // this exchange has an up message
  bool updates = false;                  // this down message's chunks are updates
  bool held = false;                     // this down message has no chunks: the workers hold the weights
  Traffic traffic;

  Impl(comm::Communicator& c, const std::vector<std::int64_t>& serverEnds, std::int64_t uf, std::int64_t df,
       const Codecs& k, std::uint64_t seed)
      : comm(c), rank(c.rank()), servers(static_cast<int>(serverEnds.size())), first(servers), last(c.size() - 1),
        table(chunksOf(serverEnds)), upFixed(uf), downFixed(df), chunks(static_cast<std::int64_t>(table.size())),
        codecs(k), lossyDown(!config::isLossless(k.down)), scratch(static_cast<std::size_t>(kChunkFloats)) {
    if (servers < 1 || servers >= c.size()) throw InternalError("RoundChain: no worker, or no server");
    upEncoders.resize(table.size());
    upDecoders.resize(table.size());
    wholeCodecs.resize(table.size());
    updateCodecs.resize(table.size());
    for (std::int64_t i = 0; i < chunks; ++i) {
      if (isServer() && table[i].owner != rank) continue;
      handled.push_back(i);
      const codec::Shapes shape = {{length(i)}};
      const std::uint64_t chunkSeed = seed * 1000003u + static_cast<std::uint64_t>(i);
      if (!isServer()) {
        upEncoders[i] = std::make_unique<codec::ErrorFeedbackEncoder>(
            codec::makeCodec(k.up, shape, chunkSeed, "compress", k.upErrorFeedback), k.upErrorFeedback);
      } else {
        upDecoders[i] = codec::makeCodec(k.up, shape, chunkSeed, "compress");
      }
      // Under a lossy down codec every copy holds bfloat16 values (roundToCopy): the whole
      // weights go as bfloat16, exactly, in half the bytes of float32.
      wholeCodecs[i] = codec::makeCodec(lossyDown ? "bf16" : k.down, shape, chunkSeed, "compress-weights");
      if (lossyDown) updateCodecs[i] = codec::makeCodec(k.down, shape, chunkSeed, "compress-weights");
    }
    if (isServer() && rank > 0) base = serverEnds[static_cast<std::size_t>(rank) - 1];
    upOrder = handled;
    if (!isServer() || rank == 0) upOrder.push_back(chunks);  // the fixed part
  }

  bool isServer() const { return rank < servers; }
  std::int64_t offset(std::int64_t i) const { return table[i].offset; }
  std::int64_t length(std::int64_t i) const { return table[i].length; }
  // A worker's neighbour toward the servers for message `i` (up: chunk i, or the fixed part
  // at `chunks`): the worker before it, or (the first worker) the chunk's owner, or server 0.
  int towardServers(std::int64_t i) const {
    if (rank > first) return rank - 1;
    return i < chunks ? table[i].owner : 0;
  }
  const codec::Codec& upCodec(std::int64_t i) const { return isServer() ? *upDecoders[i] : upEncoders[i]->codec(); }
  const codec::Codec& downCodec(std::int64_t i) const { return updates ? *updateCodecs[i] : *wholeCodecs[i]; }

  // --- requests ---------------------------------------------------------------------------
  void post(Message& m, int peer, int tag, bool send) {
    m.request = send ? comm.startSend(m.bytes, m.size, peer, tag, context)
                     : comm.startReceive(m.bytes, m.capacity, peer, tag, &m.size, context);
    m.posted = true;
    m.done = false;
  }
  bool ready(Message& m) {
    if (!m.done && m.posted && comm.test(m.request)) m.done = true;
    return m.done;
  }
  void await(Message& m) {
    if (m.done) return;
    comm.wait(m.request);
    m.done = true;
  }
  bool allDone(Messages& messages) {
    return std::all_of(messages.list.begin(), messages.list.end(), [&](Message& m) { return !m.posted || ready(m); });
  }
  // Message `i` of `messages` receives at most `capacity` bytes.
  void receiveInto(Messages& messages, std::size_t i, std::size_t capacity, int peer, int tag) {
    post(messages.place(i, capacity), peer, tag, /*send=*/false);  // counted as it arrives
  }
  // Message `i` of `messages` sends a copy of `bytes`.
  void sendOf(Messages& messages, std::size_t i, std::string_view bytes, int peer, int tag) {
    Message& m = messages.place(i, bytes.size());
    std::memcpy(m.bytes, bytes.data(), bytes.size());
    m.size = bytes.size();
    post(m, peer, tag, /*send=*/true);
    traffic.sent += static_cast<double>(bytes.size());
  }

  // --- up ---------------------------------------------------------------------------------
  // Starts an exchange in role `r`; one at a time.
  void begin(Role r, const std::string& what) {
    if (role != Role::None) throw InternalError("RoundChain: an exchange is already in flight");
    role = r;
    context = what;
  }

  // From the next worker (a server: from the first worker).
  void postUpReceives() {
    const int from = isServer() ? first : rank + 1;
    auto capacity = [&](std::int64_t i) {
      return i < chunks ? upCodec(i).maxFrameBytes() : static_cast<std::size_t>(upFixed) * sizeof(float);
    };
    std::size_t bytes = 0;
    for (std::int64_t i : upOrder) bytes += capacity(i);
    upIn.reset(static_cast<std::size_t>(chunks) + 1, bytes);
    for (std::int64_t i : upOrder) receiveInto(upIn, static_cast<std::size_t>(i), capacity(i), from, kUpTag);
    nextUp = 0;
  }
  // Worker: chunk `i` of the sum from here on (own + `incoming`, if any) encoded and sent on.
  void sendUpChunk(std::int64_t i, const float* incoming) {
    const auto start = Clock::now();
    const std::int64_t n = length(i);
    const float* mine = delta + offset(i);
    if (incoming) {
      for (std::int64_t j = 0; j < n; ++j) scratch[j] = incoming[j] + mine[j];
      mine = scratch.data();
    }
    std::string frame;
    upEncoders[i]->encode(mine, frame);
    traffic.codecSeconds += secondsSince(start);
    traffic.rawSent += static_cast<double>(n) * sizeof(float);
    sendOf(upOut, static_cast<std::size_t>(i), frame, towardServers(i), kUpTag);
  }
  void sendUpFixed(const float* incoming) {
    std::vector<float> sum(fixed, fixed + upFixed);
    if (incoming) {
      for (std::int64_t j = 0; j < upFixed; ++j) sum[j] += incoming[j];
    }
    traffic.rawSent += static_cast<double>(upFixed) * sizeof(float);
    sendOf(upOut, static_cast<std::size_t>(chunks),
           std::string_view(reinterpret_cast<const char*>(sum.data()), sum.size() * sizeof(float)), towardServers(chunks),
           kUpTag);
  }
  void decodeUp(std::int64_t i, float* out) {
    const auto start = Clock::now();
    Message& m = upIn[i];
    traffic.received += static_cast<double>(m.size);
    traffic.rawReceived += static_cast<double>(length(i)) * sizeof(float);
    try {
      upCodec(i).decode(m.bytes, m.size, out);
    } catch (const CodecError& e) {
      throw CommError(fmt::format("{}: rank {}'s pseudo-gradient: {}", context, isServer() ? first : rank + 1, e.what()));
    }
    traffic.codecSeconds += secondsSince(start);
  }
  const float* fixedOf(Message& m, std::int64_t count) {
    if (m.size != static_cast<std::size_t>(count) * sizeof(float)) {
      throw CommError(fmt::format("{}: a message of {} bytes where {} floats were due", context, m.size, count));
    }
    traffic.received += static_cast<double>(m.size);
    traffic.rawReceived += static_cast<double>(m.size);
    return reinterpret_cast<const float*>(m.bytes);
  }
  // Takes in (and passes on) what arrived of the up message; whether all of it is in.
  bool advanceUp() {
    const bool relaying = !isServer() && rank < last;
    if (!upActive || rank == last) return true;  // none, or sent whole at the start
    while (nextUp < upOrder.size() && ready(upIn[upOrder[nextUp]])) {
      const std::int64_t i = upOrder[nextUp++];
      if (i == chunks) {
        const float* in = fixedOf(upIn[i], upFixed);
        if (relaying) {
          sendUpFixed(in);
        } else {
          std::copy(in, in + upFixed, fixedOut);
        }
      } else if (relaying) {
        decodeUp(i, scratch.data());
        sendUpChunk(i, scratch.data());
      } else {
        decodeUp(i, deltaOut + offset(i) - base);
      }
    }
    return nextUp == upOrder.size();
  }

  // --- down -------------------------------------------------------------------------------
  // The down message's last message: its last chunk's, or the fixed part's alone when the
  // workers hold the weights.
  std::size_t lastDown() const { return held ? 0 : static_cast<std::size_t>(chunks); }
  // `whole`: the down message holds the weights whole (startWorker's contract), else updates.
  void postDownReceives(bool whole) {
    auto capacity = [&](std::int64_t i) {  // i: a chunk, or -1 the fixed part
      if (i < 0) return static_cast<std::size_t>(downFixed + 1) * sizeof(float);
      return whole ? wholeCodecs[i]->maxFrameBytes() : updateCodecs[i]->maxFrameBytes();
    };
    const auto end = static_cast<std::int64_t>(lastDown());
    std::size_t bytes = 0;
    for (std::int64_t i = -1; i < end; ++i) bytes += capacity(i);
    downIn.reset(static_cast<std::size_t>(chunks) + 1, bytes);
    downOut.reset(static_cast<std::size_t>(chunks) + 1, 0);  // relays send downIn's bytes
    for (std::int64_t i = -1; i < end; ++i) {
      receiveInto(downIn, static_cast<std::size_t>(i + 1), capacity(i), towardServers(i < 0 ? chunks : i), kDownTag);
    }
    nextDown = 0;
  }
  // A worker passes message `k` of the down message on as it came (the same bytes).
  void relayDown(std::size_t k) {
    if (rank == last) return;
    Message& in = downIn[k];
    downOut[k].request = comm.startSend(in.bytes, in.size, rank + 1, kDownTag, context);
    downOut[k].posted = true;
    traffic.sent += static_cast<double>(in.size);
    traffic.rawSent += static_cast<double>(k == 0 ? downFixed + 1 : length(static_cast<std::int64_t>(k) - 1)) * sizeof(float);
  }
  void applyDown(std::int64_t i) {
    const auto start = Clock::now();
    Message& m = downIn[i + 1];
    traffic.received += static_cast<double>(m.size);
    traffic.rawReceived += static_cast<double>(length(i)) * sizeof(float);
    const std::int64_t n = length(i);
    const bool inPlace = global.f32 && !updates;  // else into scratch, then added or rounded in
    try {
      downCodec(i).decode(m.bytes, m.size, inPlace ? global.f32 + offset(i) : scratch.data());
    } catch (const CodecError& e) {
      throw CommError(fmt::format("{}: the server's weights: {}", context, e.what()));
    }
    if (global.f32) {
      if (updates) addUpdate(global.f32 + offset(i), n);
    } else {  // bfloat16: the whole weights (as the servers' copy holds them), or moved
      std::uint16_t* out = global.bf16 + offset(i);
      for (std::int64_t j = 0; j < n; ++j) {
        const float weight = updates ? roundedUpdate(c10::BFloat16(out[j], c10::BFloat16::from_bits()), scratch[j]) : scratch[j];
        out[j] = c10::BFloat16(weight).x;
      }
    }
    traffic.codecSeconds += secondsSince(start);
  }
  // `weights` += the decoded update in scratch: one addition per float, as on every rank
  // (rounded to bfloat16 under a lossy down codec: roundedUpdate).
  void addUpdate(float* out, std::int64_t n) {
    if (lossyDown) {
      for (std::int64_t j = 0; j < n; ++j) out[j] = roundedUpdate(out[j], scratch[j]);
    } else {
      for (std::int64_t j = 0; j < n; ++j) out[j] += scratch[j];
    }
  }
  bool advanceDown() {
    while (nextDown <= lastDown() && ready(downIn[nextDown])) {
      const std::size_t k = nextDown++;
      if (k == 0) {
        const float* in = fixedOf(downIn[0], downFixed + 1);
        if (in[0] != kWholeWeights && in[0] != kUpdate && in[0] != kHeld) {
          throw CommError(fmt::format("{}: a garbled down message", context));
        }
        if (in[0] == kUpdate && !lossyDown) throw CommError(fmt::format("{}: an update where the weights were due", context));
        if ((in[0] == kHeld) != held) {
          throw CommError(fmt::format("{}: the server and this worker disagree on whether the workers hold the "
                                      "initial weights", context));
        }
        updates = in[0] == kUpdate;
        std::copy(in + 1, in + 1 + downFixed, fixedOut);
      } else {
        applyDown(static_cast<std::int64_t>(k) - 1);
      }
      relayDown(k);
    }
    return nextDown > lastDown();
  }

  // --- the exchange -------------------------------------------------------------------------
  bool advance() {
    switch (role) {
      case Role::None: return true;
      case Role::ServerUp: return advanceUp();
      case Role::ServerDown: return allDone(downOut);
      case Role::Worker: {
        const bool up = advanceUp() && allDone(upOut);
        const bool down = advanceDown() && allDone(downOut);
        return up && down;
      }
    }
    return true;
  }
  // The message this rank needs next, to wait for when advance() cannot go on.
  Message* awaited() {
    auto firstOpen = [](Messages& messages) -> Message* {
      for (Message& m : messages.list) {
        if (m.posted && !m.done) return &m;
      }
      return nullptr;
    };
    if (upActive && role != Role::ServerDown && rank < last && nextUp < upOrder.size()) return &upIn[upOrder[nextUp]];
    if (role == Role::Worker && nextDown <= lastDown()) return &downIn[nextDown];
    if (Message* m = firstOpen(upOut)) return m;
    return firstOpen(downOut);
  }
};

RoundChain::RoundChain(comm::Communicator& comm, const std::vector<std::int64_t>& serverEnds, std::int64_t upFixed,
                       std::int64_t downFixed, const Codecs& codecs, std::uint64_t seed)
    : impl_(std::make_unique<Impl>(comm, serverEnds, upFixed, downFixed, codecs, seed)) {}

RoundChain::~RoundChain() = default;

bool RoundChain::sendsUpdates() const { return impl_->lossyDown; }

void RoundChain::scaleUpResidual(double factor) {
  for (auto& encoder : impl_->upEncoders) {
    if (encoder) encoder->scaleResidual(static_cast<float>(factor));
  }
}

void RoundChain::dropUpResidual() {
  for (auto& encoder : impl_->upEncoders) {
    if (encoder) encoder->dropResidual();
  }
}

float roundedUpdate(float weight, float update) { return static_cast<float>(c10::BFloat16(weight + update)); }

void roundToCopy(float* weights, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) weights[j] = static_cast<float>(c10::BFloat16(weights[j]));
}

void RoundChain::startWorker(const float* delta, const float* fixed, GlobalCopy global, float* downFixed,
                             const std::string& context, bool weightsHeld) {
  Impl& s = *impl_;
  if ((global.bf16 != nullptr) != s.lossyDown || (global.f32 != nullptr) == s.lossyDown) {
    throw InternalError("RoundChain: a worker's copy is bfloat16 exactly when the down codec is lossy");
  }
  s.begin(Impl::Role::Worker, context);
  s.delta = delta;
  s.fixed = fixed;
  s.global = global;
  s.fixedOut = downFixed;
  s.upActive = delta != nullptr;
  s.held = weightsHeld && !s.upActive;
  std::size_t upBytes = 0;
  if (s.upActive) {
    for (std::int64_t i = 0; i < s.chunks; ++i) upBytes += s.upEncoders[i]->codec().maxFrameBytes();
    upBytes += static_cast<std::size_t>(s.upFixed) * sizeof(float);
  }
  s.upOut.reset(s.upActive ? static_cast<std::size_t>(s.chunks) + 1 : 0, upBytes);
  if (s.upActive && s.rank < s.last) s.postUpReceives();
  s.postDownReceives(/*whole=*/!s.upActive || !s.lossyDown);
  if (s.upActive && s.rank == s.last) {
    for (std::int64_t i = 0; i < s.chunks; ++i) s.sendUpChunk(i, nullptr);
    s.sendUpFixed(nullptr);
  }
}

void RoundChain::startServerUp(float* delta, float* fixed, const std::string& context) {
  Impl& s = *impl_;
  s.begin(Impl::Role::ServerUp, context);
  s.upActive = true;
  s.deltaOut = delta;
  s.fixedOut = fixed;
  s.postUpReceives();
}

void RoundChain::startServerDown(const float* fixed, float* weights, const float* target, const std::string& context) {
  Impl& s = *impl_;
  s.begin(Impl::Role::ServerDown, context);
  s.upActive = false;
  s.updates = target != nullptr;
  s.held = weights == nullptr;
  if (s.updates && !s.lossyDown) throw InternalError("RoundChain: updates with a lossless down codec");
  if (s.held && s.updates) throw InternalError("RoundChain: an update of weights the servers do not send");
  const std::vector<std::int64_t> none;
  const std::vector<std::int64_t>& sent = s.held ? none : s.handled;  // the chunks this message carries
  std::size_t downBytes = s.rank == 0 ? static_cast<std::size_t>(s.downFixed + 1) * sizeof(float) : 0;
  for (std::int64_t i : sent) downBytes += s.downCodec(i).maxFrameBytes();
  s.downOut.reset(static_cast<std::size_t>(s.chunks) + 1, downBytes);
  if (s.rank == 0) {
    std::vector<float> head(static_cast<std::size_t>(s.downFixed) + 1);
    head[0] = s.held ? kHeld : s.updates ? kUpdate : kWholeWeights;
    std::copy(fixed, fixed + s.downFixed, head.begin() + 1);
    s.traffic.rawSent += static_cast<double>(head.size() * sizeof(float));
    s.sendOf(s.downOut, 0, std::string_view(reinterpret_cast<const char*>(head.data()), head.size() * sizeof(float)),
             s.first, kDownTag);
  }
  for (std::int64_t i : sent) {
    const auto start = Clock::now();
    const std::int64_t n = s.length(i), at = s.offset(i) - s.base;
    std::string frame;
    if (!s.updates) {
      s.wholeCodecs[i]->encode(weights + at, frame);
    } else {
      for (std::int64_t j = 0; j < n; ++j) s.scratch[j] = target[at + j] - weights[at + j];
      s.updateCodecs[i]->encode(s.scratch.data(), frame);
      s.updateCodecs[i]->decode(frame.data(), frame.size(), s.scratch.data());
      s.addUpdate(weights + at, n);
    }
    s.traffic.codecSeconds += secondsSince(start);
    s.traffic.rawSent += static_cast<double>(n) * sizeof(float);
    s.sendOf(s.downOut, static_cast<std::size_t>(i + 1), frame, s.first, kDownTag);
  }
}

bool RoundChain::advance() {
  Impl& s = *impl_;
  const bool done = s.advance();
  if (done && s.role != Impl::Role::None) {
    s.role = Impl::Role::None;
    // The messages' bytes go between exchanges (a worker trains meanwhile, at its peak of
    // memory): each exchange allocates what it takes in and sends.
    for (Messages* messages : {&s.upIn, &s.upOut, &s.downIn, &s.downOut}) messages->clear();
    portable::giveBackFreedMemory();
  }
  return done;
}

bool RoundChain::downArrived() const {
  return impl_->role != Impl::Role::Worker || impl_->nextDown > impl_->lastDown();
}

void RoundChain::finish() {
  while (!advance()) {
    Message* next = impl_->awaited();
    if (!next) throw InternalError("RoundChain: an exchange waits for nothing");
    impl_->await(*next);
  }
}

RoundChain::Traffic RoundChain::take() { return std::exchange(impl_->traffic, Traffic()); }

}  // namespace pstrain::exchanges::rounds
