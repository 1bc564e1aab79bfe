#include "runtime/protocol/Frames.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/codec/Codec.h"
#include "runtime/metrics/Clock.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepProtocol.h"

namespace pstrain::protocol {
namespace {

using metrics::Clock;
using metrics::secondsSince;

Bytes bytesOf(const FloatBuffer& buffer) {
  return {reinterpret_cast<char*>(buffer.data()), buffer.size() * sizeof(float)};
}

// The identity coding of the up message: its floats, in place.
class RawUp : public UpFrame {
 public:
  explicit RawUp(StepMessages& m) : m_(m) {}
  bool summable() const override { return true; }
  Bytes encode(double) override { return bytesOf(m_.up); }
  void addTo(const char* payload, std::size_t size, float* up) override {
    if (size != m_.upBytes()) {
      throw CommError(fmt::format("a gradient message of {} bytes, where one is {}", size, m_.upBytes()));
    }
    for (std::size_t i = 0; i < m_.up.size(); ++i) {
      float value;  // copied out: the payload need not be float-aligned
      std::memcpy(&value, payload + i * sizeof(float), sizeof value);
      up[i] += value;
    }
  }
  double takeCodecSeconds() override { return 0; }

 private:
  StepMessages& m_;
};

// [gradient frame][buffers + trailer, raw], with error feedback where it is on.
class CodedUp : public UpFrame {
 public:
  CodedUp(const config::TrainConfig& cfg, const models::Net& model, StepMessages& m, std::uint64_t seed) : m_(m) {
    const bool feedback = config::errorFeedbackOn(cfg.errorFeedback, cfg.gradientCodec());
    encoder_ = std::make_unique<codec::ErrorFeedbackEncoder>(
        codec::makeCodec(cfg.gradientCodec(), parameterShapes(model), seed, "compress", feedback), feedback);
    decoded_.resize(static_cast<std::size_t>(m.grad.numel()));
  }
  bool summable() const override { return false; }
  Bytes encode(double weightsDecodeSeconds) override {
    const auto start = Clock::now();
    payload_.clear();
    encoder_->encode(m_.grad.data_ptr<float>(), payload_);
    const double seconds = secondsSince(start);
    codecSeconds_ += seconds;
    m_.trailer[kCodecSeconds] = static_cast<float>(seconds + weightsDecodeSeconds);
    payload_.append(reinterpret_cast<const char*>(m_.tail()), fixedBytes());
    return {payload_.data(), payload_.size()};
  }
  void addTo(const char* payload, std::size_t size, float* up) override {
    const auto start = Clock::now();
    if (size < fixedBytes()) throw CodecError(fmt::format("gradient payload of {} bytes is shorter than its fixed part", size));
    encoder_->codec().decode(payload, size - fixedBytes(), decoded_.data());
    const std::size_t n = gradientFloats();
    for (std::size_t i = 0; i < n; ++i) up[i] += decoded_[i];
    const char* fixed = payload + size - fixedBytes();
    for (std::size_t i = 0; i < fixedBytes() / sizeof(float); ++i) {
      float value;  // copied out: the payload need not be float-aligned
      std::memcpy(&value, fixed + i * sizeof(float), sizeof value);
      up[n + i] += value;
    }
    codecSeconds_ += secondsSince(start);
  }
  double takeCodecSeconds() override { return std::exchange(codecSeconds_, 0.0); }

 private:
  std::size_t gradientFloats() const { return static_cast<std::size_t>(m_.grad.numel()); }
  std::size_t fixedBytes() const { return m_.tailFloats() * sizeof(float); }

  StepMessages& m_;
  std::unique_ptr<codec::ErrorFeedbackEncoder> encoder_;
  std::vector<float> decoded_;
  std::string payload_;
  double codecSeconds_ = 0;
};

// The identity coding of the down message: its floats, in place, always the same size.
class RawDown : public DownFrame {
 public:
  explicit RawDown(StepMessages& m) : m_(m) {}
  bool fixedSize() const override { return true; }
  void pack() override {}
  Bytes packed() override { return bytesOf(m_.down); }
  Bytes inbox(std::size_t) override { return bytesOf(m_.down); }
  void accept(const char*, std::size_t size) override {
    if (size != m_.downBytes()) {
      throw CommError(fmt::format("the server sent {} bytes, a weights message is {}", size, m_.downBytes()));
    }
  }
  double takeDecodeSeconds() override { return 0; }
  double takeCodecSeconds() override { return 0; }

 private:
  StepMessages& m_;
};

// The server's down message to workers that hold bfloat16 weights (--precision
// bf16-weights): its float32 master weights converted as torch converts them, in the
// workers' layout (StepProtocol.h), which they receive in place (RawDown).
class Bf16Down : public DownFrame {
 public:
  Bf16Down(const StepMessages& m, std::int64_t buffers)
      : m_(m), wire_(downBytes(static_cast<std::size_t>(m.weights.numel()), static_cast<std::size_t>(buffers), m.ranks,
                               true) / sizeof(float)) {}
  bool fixedSize() const override { return true; }
  void pack() override {
    const std::int64_t n = m_.weights.numel(), w = static_cast<std::int64_t>(weightFloats(static_cast<std::size_t>(n), true));
    std::memcpy(wire_.data(), m_.down.data(), sizeof(StepHeader));
    wire_.view(kHeaderFloats, w).view(at::kBFloat16).narrow(0, 0, n).copy_(m_.weights);
    wire_.view(kHeaderFloats + w, m_.downTail.numel()).copy_(m_.downTail);
  }
  Bytes packed() override { return bytesOf(wire_); }
  Bytes inbox(std::size_t) override { throw InternalError("the server receives no down message"); }
  void accept(const char*, std::size_t) override { throw InternalError("the server receives no down message"); }
  double takeDecodeSeconds() override { return 0; }
  double takeCodecSeconds() override { return 0; }

 private:
  const StepMessages& m_;
  FloatBuffer wire_;
};

// [header][buffers and shares, raw][weights frame].
class CodedDown : public DownFrame {
 public:
  CodedDown(const config::TrainConfig& cfg, const models::Net& model, StepMessages& m, std::uint64_t seed) : m_(m) {
    config::checkedCodec(cfg.weightCodec(), true, "compress-weights");
    codec_ = codec::makeCodec(cfg.weightCodec(), parameterShapes(model), seed, "compress-weights");
    inbox_.resize(codec_->maxFrameBytes() + fixedBytes());
  }
  bool fixedSize() const override { return false; }
  void pack() override {
    const auto start = Clock::now();
    payload_.assign(reinterpret_cast<const char*>(m_.down.data()), sizeof(StepHeader));
    payload_.append(reinterpret_cast<const char*>(m_.downTail.data_ptr<float>()), fixedBytes() - sizeof(StepHeader));
    codec_->encode(m_.weights.data_ptr<float>(), payload_);
    codecSeconds_ += secondsSince(start);
  }
  Bytes packed() override { return {payload_.data(), payload_.size()}; }
  Bytes inbox(std::size_t size) override {
    if (size > inbox_.size()) inbox_.resize(size);
    return {inbox_.data(), inbox_.size()};
  }
  void accept(const char* received, std::size_t size) override {
    const auto start = Clock::now();
    if (size < fixedBytes()) throw CodecError(fmt::format("weights payload of {} bytes is shorter than its fixed part", size));
    std::memcpy(m_.down.data(), received, sizeof(StepHeader));
    std::memcpy(m_.downTail.data_ptr<float>(), received + sizeof(StepHeader), fixedBytes() - sizeof(StepHeader));
    codec_->decode(received + fixedBytes(), size - fixedBytes(), m_.weights.data_ptr<float>());
    const double seconds = secondsSince(start);
    codecSeconds_ += seconds;
    decodeSeconds_ += seconds;
  }
  double takeDecodeSeconds() override { return std::exchange(decodeSeconds_, 0.0); }
  double takeCodecSeconds() override { return std::exchange(codecSeconds_, 0.0); }

 private:
  std::size_t fixedBytes() const {
    return sizeof(StepHeader) + static_cast<std::size_t>(m_.downTail.numel()) * sizeof(float);
  }

  StepMessages& m_;
  std::unique_ptr<codec::Codec> codec_;
  std::string payload_;
  std::vector<char> inbox_;
  double codecSeconds_ = 0, decodeSeconds_ = 0;
};

}  // namespace

std::unique_ptr<UpFrame> makeUpFrame(const config::TrainConfig& cfg, const models::Net& model, StepMessages& messages,
                                     std::uint64_t seed) {
  if (!cfg.compressesGradients()) return std::make_unique<RawUp>(messages);
  return std::make_unique<CodedUp>(cfg, model, messages, seed);
}

std::unique_ptr<DownFrame> makeDownFrame(const config::TrainConfig& cfg, const models::Net& model,
                                         StepMessages& messages, std::uint64_t seed) {
  if (cfg.compressesWeights()) return std::make_unique<CodedDown>(cfg, model, messages, seed);
  // The server's float32 weights to workers that hold bfloat16 ones.
  if (cfg.bf16Weights() && messages.weights.scalar_type() == at::kFloat) {
    return std::make_unique<Bf16Down>(messages, bufferCount(model));
  }
  return std::make_unique<RawDown>(messages);
}

}  // namespace pstrain::protocol
