#include "runtime/exchanges/rounds/RoundChain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/Errors.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/metrics/Clock.h"

namespace pstrain::roles {
namespace {

using metrics::Clock;
using metrics::secondsSince;

// Floats per chunk: small enough that a chunk moves on while the next travels (a quarter
// MiB raw, 36 KiB in int4), large enough that a model of a billion parameters is a few
// thousand messages a round.
constexpr std::int64_t kChunkFloats = std::int64_t(1) << 16;
constexpr int kUpTag = comm::Communicator::kFirstFreeTag, kDownTag = comm::Communicator::kFirstFreeTag + 1;
// The down message's first float: what its chunks carry.
constexpr float kWholeWeights = 0, kUpdate = 1;

// One message of an exchange: its bytes (to send, or where one is received) and its request.
struct Message {
  std::vector<char> bytes;
  std::size_t size = 0;  // sent, or received
  std::size_t request = 0;
  bool posted = false, done = false;
};

}  // namespace

struct RoundChain::Impl {
  comm::Communicator& comm;
  const int rank, last;  // the chain: last, last - 1, ..., 1, 0 up; 0, 1, ..., last down
  const std::int64_t weights, upFixed, downFixed, chunks;
  Codecs codecs;
  bool lossyDown;
  std::vector<std::unique_ptr<codec::ErrorFeedbackEncoder>> upEncoders;  // workers, by chunk
  std::vector<std::unique_ptr<codec::Codec>> upDecoders, wholeCodecs, updateCodecs;  // by chunk
  std::vector<float> scratch;  // a chunk's decoded floats

  // The exchange in flight.
  enum class Role { None, Worker, ServerUp, ServerDown } role = Role::None;
  std::string context;
  const float* delta = nullptr;
  const float* fixed = nullptr;
  float* deltaOut = nullptr;  // the server's up sum
  float* fixedOut = nullptr;
  float* global = nullptr;  // a worker's copy of the weights
  std::vector<Message> upIn, upOut, downIn, downOut;  // chunks, then (up) the fixed part last / (down) first
  std::size_t nextUp = 0, nextDown = 0;  // the next message to take in, in order
  bool upActive = false;                 // this exchange has an up message
  bool updates = false;                  // this down message's chunks are updates
  Traffic traffic;

  Impl(comm::Communicator& c, std::int64_t w, std::int64_t uf, std::int64_t df, const Codecs& k, std::uint64_t seed)
      : comm(c), rank(c.rank()), last(c.size() - 1), weights(w), upFixed(uf), downFixed(df),
        chunks((w + kChunkFloats - 1) / kChunkFloats), codecs(k), lossyDown(!config::isLossless(k.down)),
        scratch(static_cast<std::size_t>(std::min(w, kChunkFloats))) {
    for (std::int64_t i = 0; i < chunks; ++i) {
      const codec::Shapes shape = {{length(i)}};
      const std::uint64_t chunkSeed = seed * 1000003u + static_cast<std::uint64_t>(i);
      if (rank > 0) {
        upEncoders.push_back(std::make_unique<codec::ErrorFeedbackEncoder>(
            codec::makeCodec(k.up, shape, chunkSeed, "compress", k.upErrorFeedback), k.upErrorFeedback));
      } else {
        upDecoders.push_back(codec::makeCodec(k.up, shape, chunkSeed, "compress"));
      }
      wholeCodecs.push_back(codec::makeCodec(lossyDown ? config::kRawCodec : k.down, shape, chunkSeed, "compress-weights"));
      if (lossyDown) updateCodecs.push_back(codec::makeCodec(k.down, shape, chunkSeed, "compress-weights"));
    }
  }

  std::int64_t offset(std::int64_t i) const { return i * kChunkFloats; }
  std::int64_t length(std::int64_t i) const { return std::min(kChunkFloats, weights - offset(i)); }
  const codec::Codec& upCodec(std::int64_t i) const { return rank > 0 ? upEncoders[i]->codec() : *upDecoders[i]; }
  const codec::Codec& downCodec(std::int64_t i) const { return updates ? *updateCodecs[i] : *wholeCodecs[i]; }

  // --- requests ---------------------------------------------------------------------------
  void post(Message& m, int peer, int tag, bool send) {
    m.request = send ? comm.startSend(m.bytes.data(), m.size, peer, tag, context)
                     : comm.startReceive(m.bytes.data(), m.bytes.size(), peer, tag, &m.size, context);
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
  bool allDone(std::vector<Message>& messages) {
    return std::all_of(messages.begin(), messages.end(), [&](Message& m) { return !m.posted || ready(m); });
  }
  static void resize(std::vector<Message>& messages, std::size_t count) {
    messages.resize(count);
    for (Message& m : messages) m.posted = m.done = false;
  }
  void receiveInto(Message& m, std::size_t capacity, int peer, int tag) {
    if (m.bytes.size() < capacity) m.bytes.resize(capacity);
    post(m, peer, tag, /*send=*/false);  // counted as it arrives
  }
  // Sends `bytes` as message `m` (its bytes now owned by m).
  void sendOf(Message& m, std::string_view bytes, int peer, int tag) {
    m.bytes.assign(bytes.begin(), bytes.end());
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

  void postUpReceives() {
    resize(upIn, static_cast<std::size_t>(chunks) + 1);
    for (std::int64_t i = 0; i < chunks; ++i) receiveInto(upIn[i], upCodec(i).maxFrameBytes(), rank + 1, kUpTag);
    receiveInto(upIn[chunks], static_cast<std::size_t>(upFixed) * sizeof(float), rank + 1, kUpTag);
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
    sendOf(upOut[i], frame, rank - 1, kUpTag);
  }
  void sendUpFixed(const float* incoming) {
    std::vector<float> sum(fixed, fixed + upFixed);
    if (incoming) {
      for (std::int64_t j = 0; j < upFixed; ++j) sum[j] += incoming[j];
    }
    traffic.rawSent += static_cast<double>(upFixed) * sizeof(float);
    sendOf(upOut[chunks], std::string_view(reinterpret_cast<const char*>(sum.data()), sum.size() * sizeof(float)),
           rank - 1, kUpTag);
  }
  void decodeUp(std::int64_t i, float* out) {
    const auto start = Clock::now();
    Message& m = upIn[i];
    traffic.received += static_cast<double>(m.size);
    traffic.rawReceived += static_cast<double>(length(i)) * sizeof(float);
    try {
      upCodec(i).decode(m.bytes.data(), m.size, out);
    } catch (const CodecError& e) {
      throw CommError(fmt::format("{}: rank {}'s pseudo-gradient: {}", context, rank + 1, e.what()));
    }
    traffic.codecSeconds += secondsSince(start);
  }
  const float* fixedOf(Message& m, std::int64_t count) {
    if (m.size != static_cast<std::size_t>(count) * sizeof(float)) {
      throw CommError(fmt::format("{}: a message of {} bytes where {} floats were due", context, m.size, count));
    }
    traffic.received += static_cast<double>(m.size);
    traffic.rawReceived += static_cast<double>(m.size);
    return reinterpret_cast<const float*>(m.bytes.data());
  }
  // Takes in (and passes on) what arrived of the up message; whether all of it is in.
  bool advanceUp() {
    const bool relaying = rank > 0 && rank < last;
    if (!upActive || rank == last) return true;  // none, or sent whole at the start
    while (nextUp <= static_cast<std::size_t>(chunks) && ready(upIn[nextUp])) {
      const std::int64_t i = static_cast<std::int64_t>(nextUp++);
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
        decodeUp(i, deltaOut + offset(i));
      }
    }
    return nextUp > static_cast<std::size_t>(chunks);
  }

  // --- down -------------------------------------------------------------------------------
  void postDownReceives() {
    resize(downIn, static_cast<std::size_t>(chunks) + 1);
    resize(downOut, static_cast<std::size_t>(chunks) + 1);
    receiveInto(downIn[0], static_cast<std::size_t>(downFixed + 1) * sizeof(float), rank - 1, kDownTag);
    for (std::int64_t i = 0; i < chunks; ++i) {
      const std::size_t capacity = std::max(wholeCodecs[i]->maxFrameBytes(),
                                            lossyDown ? updateCodecs[i]->maxFrameBytes() : std::size_t(0));
      receiveInto(downIn[i + 1], capacity, rank - 1, kDownTag);
    }
    nextDown = 0;
  }
  // A worker passes message `k` of the down message on as it came (the same bytes).
  void relayDown(std::size_t k) {
    if (rank == last) return;
    Message& in = downIn[k];
    downOut[k].request = comm.startSend(in.bytes.data(), in.size, rank + 1, kDownTag, context);
    downOut[k].posted = true;
    traffic.sent += static_cast<double>(in.size);
    traffic.rawSent += static_cast<double>(k == 0 ? downFixed + 1 : length(static_cast<std::int64_t>(k) - 1)) * sizeof(float);
  }
  void applyDown(std::int64_t i) {
    const auto start = Clock::now();
    Message& m = downIn[i + 1];
    traffic.received += static_cast<double>(m.size);
    traffic.rawReceived += static_cast<double>(length(i)) * sizeof(float);
    float* out = global + offset(i);
    try {
      if (!updates) {
        wholeCodecs[i]->decode(m.bytes.data(), m.size, out);
      } else {
        updateCodecs[i]->decode(m.bytes.data(), m.size, scratch.data());
        addUpdate(out, length(i));
      }
    } catch (const CodecError& e) {
      throw CommError(fmt::format("{}: the server's weights: {}", context, e.what()));
    }
    traffic.codecSeconds += secondsSince(start);
  }
  // `weights` += the decoded update in scratch: one addition per float, as on every rank.
  void addUpdate(float* out, std::int64_t n) {
    for (std::int64_t j = 0; j < n; ++j) out[j] += scratch[j];
  }
  bool advanceDown() {
    while (nextDown <= static_cast<std::size_t>(chunks) && ready(downIn[nextDown])) {
      const std::size_t k = nextDown++;
      if (k == 0) {
        const float* in = fixedOf(downIn[0], downFixed + 1);
        if (in[0] != kWholeWeights && in[0] != kUpdate) throw CommError(fmt::format("{}: a garbled down message", context));
        if (in[0] == kUpdate && !lossyDown) throw CommError(fmt::format("{}: an update where the weights were due", context));
        updates = in[0] == kUpdate;
        std::copy(in + 1, in + 1 + downFixed, fixedOut);
      } else {
        applyDown(static_cast<std::int64_t>(k) - 1);
      }
      relayDown(k);
    }
    return nextDown > static_cast<std::size_t>(chunks);
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
    auto firstOpen = [](std::vector<Message>& messages) -> Message* {
      for (Message& m : messages) {
        if (m.posted && !m.done) return &m;
      }
      return nullptr;
    };
    if (upActive && role != Role::ServerDown && rank < last && nextUp <= static_cast<std::size_t>(chunks)) {
      return &upIn[nextUp];
    }
    if (role == Role::Worker && nextDown <= static_cast<std::size_t>(chunks)) return &downIn[nextDown];
    if (Message* m = firstOpen(upOut)) return m;
    return firstOpen(downOut);
  }
};

RoundChain::RoundChain(comm::Communicator& comm, std::int64_t weights, std::int64_t upFixed, std::int64_t downFixed,
                       const Codecs& codecs, std::uint64_t seed)
    : impl_(std::make_unique<Impl>(comm, weights, upFixed, downFixed, codecs, seed)) {}

RoundChain::~RoundChain() = default;

bool RoundChain::sendsUpdates() const { return impl_->lossyDown; }

void RoundChain::scaleUpResidual(double factor) {
  for (auto& encoder : impl_->upEncoders) encoder->scaleResidual(static_cast<float>(factor));
}

void RoundChain::startWorker(const float* delta, const float* fixed, float* global, float* downFixed,
                             const std::string& context) {
  Impl& s = *impl_;
  s.begin(Impl::Role::Worker, context);
  s.delta = delta;
  s.fixed = fixed;
  s.global = global;
  s.fixedOut = downFixed;
  s.upActive = delta != nullptr;
  Impl::resize(s.upOut, s.upActive ? static_cast<std::size_t>(s.chunks) + 1 : 0);
  if (s.upActive && s.rank < s.last) s.postUpReceives();
  s.postDownReceives();
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
  if (s.updates && !s.lossyDown) throw InternalError("RoundChain: updates with a lossless down codec");
  Impl::resize(s.downOut, static_cast<std::size_t>(s.chunks) + 1);
  std::vector<float> head(static_cast<std::size_t>(s.downFixed) + 1);
  head[0] = s.updates ? kUpdate : kWholeWeights;
  std::copy(fixed, fixed + s.downFixed, head.begin() + 1);
  s.traffic.rawSent += static_cast<double>(head.size() * sizeof(float));
  s.sendOf(s.downOut[0], std::string_view(reinterpret_cast<const char*>(head.data()), head.size() * sizeof(float)), 1,
           kDownTag);
  for (std::int64_t i = 0; i < s.chunks; ++i) {
    const auto start = Clock::now();
    const std::int64_t n = s.length(i), at = s.offset(i);
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
    s.sendOf(s.downOut[i + 1], frame, 1, kDownTag);
  }
}

bool RoundChain::advance() {
  const bool done = impl_->advance();
  if (done) impl_->role = Impl::Role::None;
  return done;
}

bool RoundChain::downArrived() const {
  return impl_->role != Impl::Role::Worker || impl_->nextDown > static_cast<std::size_t>(impl_->chunks);
}

void RoundChain::finish() {
  while (!advance()) {
    Message* next = impl_->awaited();
    if (!next) throw InternalError("RoundChain: an exchange waits for nothing");
    impl_->await(*next);
  }
}

RoundChain::Traffic RoundChain::take() { return std::exchange(impl_->traffic, Traffic()); }

}  // namespace pstrain::roles
