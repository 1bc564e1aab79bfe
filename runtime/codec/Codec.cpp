#include "runtime/codec/Codec.h"

#include <fmt/format.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "runtime/Errors.h"
#include "runtime/Varint.h"
#include "runtime/config/Codecs.h"

namespace pstrain::codec {
namespace {

constexpr std::uint32_t kMagic = 0x31435350;  // "PSC1"

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Reads fixed-size values from a byte range, throwing CodecError past its end.
struct Reader {
  const char* data;
  std::size_t size;
  std::size_t at = 0;
  template <typename T>
  T get() {
    T value;
    need(sizeof value);
    std::memcpy(&value, data + at, sizeof value);
    at += sizeof value;
    return value;
  }
  void need(std::size_t bytes) const {
    if (bytes > size - at) throw CodecError(fmt::format("payload truncated: {} more bytes needed at offset {} of {}", bytes, at, size));
  }
};

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t(1), std::multiplies<>());
}

// Calls block(begin, end, b) for each block of at most `size` values of `shapes`' buffer, in
// order (b counts them from 0): blocks restart at each tensor, so that a key range of whole
// tensors (exchanges/Ranges.h) has the blocks one buffer of every tensor has.
template <typename F>
void forEachBlockOf(const Shapes& shapes, std::size_t size, F&& block) {
  std::size_t at = 0, b = 0;
  for (const auto& shape : shapes) {
    const auto count = static_cast<std::size_t>(numel(shape));
    for (std::size_t begin = at; begin < at + count; begin += size) block(begin, std::min(at + count, begin + size), b++);
    at += count;
  }
}

at::Tensor wrap(const float* values, std::int64_t count) {
  return torch::from_blob(const_cast<float*>(values), {count}, torch::kFloat32);
}

// --- codecs --------------------------------------------------------------------------------

class Raw : public Codec {
 public:
  explicit Raw(const CodecArgs& a) : Codec(a) {}
  void encodeBody(const float* v, std::string& body) override {
    body.append(reinterpret_cast<const char*>(v), count() * sizeof(float));
  }
  void decodeBody(const char* body, std::size_t size, float* out) const override {
    if (size != count() * sizeof(float)) throw CodecError(fmt::format("raw payload of {} bytes for {} floats", size, count()));
    std::memcpy(out, body, size);
  }
  std::size_t maxBodyBytes() const override { return count() * sizeof(float); }
};

class Zlib : public Codec {
 public:
  explicit Zlib(const CodecArgs& a)
      : Codec(a), level_(std::isnan(a.parameter) ? Z_DEFAULT_COMPRESSION : static_cast<int>(a.parameter)) {}
  void encodeBody(const float* v, std::string& body) override {
    const std::size_t offset = body.size();
    uLongf length = compressBound(static_cast<uLong>(count() * sizeof(float)));
    body.resize(offset + length);
    int rc = compress2(reinterpret_cast<Bytef*>(&body[offset]), &length, reinterpret_cast<const Bytef*>(v),
                       static_cast<uLong>(count() * sizeof(float)), level_);
    if (rc != Z_OK) throw CodecError(fmt::format("zlib compress failed ({})", rc));
    body.resize(offset + length);
  }
  void decodeBody(const char* body, std::size_t size, float* out) const override {
    uLongf length = static_cast<uLongf>(count() * sizeof(float));
    int rc = uncompress(reinterpret_cast<Bytef*>(out), &length, reinterpret_cast<const Bytef*>(body), static_cast<uLong>(size));
    if (rc != Z_OK || length != count() * sizeof(float)) throw CodecError(fmt::format("zlib payload does not inflate to {} floats", count()));
  }
  std::size_t maxBodyBytes() const override { return compressBound(static_cast<uLong>(count() * sizeof(float))); }

 private:
  int level_;
};

class HalfPrecision : public Codec {
 public:
  HalfPrecision(const CodecArgs& a, c10::ScalarType type) : Codec(a), type_(type) {}
  void encodeBody(const float* v, std::string& body) override {
    at::Tensor half = wrap(v, count()).to(type_);
    body.append(static_cast<const char*>(half.data_ptr()), count() * 2);
  }
  void decodeBody(const char* body, std::size_t size, float* out) const override {
    if (size != count() * 2) throw CodecError(fmt::format("{} payload of {} bytes for {} values", spec(), size, count()));
    at::Tensor half = torch::from_blob(const_cast<char*>(body), {static_cast<std::int64_t>(count())},
                                       torch::TensorOptions().dtype(type_));
    wrap(out, count()).copy_(half);
  }
  std::size_t maxBodyBytes() const override { return count() * 2; }
  bool rounds() const override { return true; }

 private:
  c10::ScalarType type_;
};

class Int8 : public Codec {
 public:
  explicit Int8(const CodecArgs& a) : Codec(a) {}
  void encodeBody(const float* v, std::string& body) override {
    for (const auto& shape : shapes()) {
      const std::int64_t n = numel(shape);
      at::Tensor x = wrap(v, n);
      const float maxAbs = n ? x.abs().max().item<float>() : 0.0f;
      const float scale = maxAbs > 0 && std::isfinite(maxAbs) ? maxAbs / 127.0f : (std::isfinite(maxAbs) ? 0.0f : NAN);
      put(body, scale);
      at::Tensor q = scale > 0 ? x.div(scale).round_().clamp_(-127, 127).to(torch::kInt8) : torch::zeros({n}, torch::kInt8);
      body.append(static_cast<const char*>(q.data_ptr()), n);
      v += n;
    }
  }
  void decodeBody(const char* body, std::size_t size, float* out) const override {
    Reader in{body, size};
    for (const auto& shape : shapes()) {
      const std::int64_t n = numel(shape);
      const float scale = in.get<float>();
      in.need(n);
      at::Tensor q = torch::from_blob(const_cast<char*>(body + in.at), {n}, torch::kInt8);
      wrap(out, n).copy_(q).mul_(scale);
      in.at += n;
      out += n;
    }
    if (in.at != size) throw CodecError("int8 payload has trailing bytes");
  }
  std::size_t maxBodyBytes() const override { return count() + shapes().size() * sizeof(float); }
  bool rounds() const override { return true; }
};

// int4: each block of kBlock values of a tensor as one float scale (the block's largest
// magnitude / 7) and the values rounded to [-7, 7], two to a byte (biased by 8): about 0.5625
// bytes a value, 14% of float32. Blocks restart at each tensor (forEachBlockOf), so that K
// servers' ranges of whole tensors code as one server's buffer does. Decoding is one
// multiply per value, so every rank that decodes a payload gets the same floats bit for bit.
class Int4 : public Codec {
 public:
  static constexpr std::size_t kBlock = 64;
  explicit Int4(const CodecArgs& a) : Codec(a) {
    forEachBlockOf(shapes(), kBlock, [&](std::size_t, std::size_t, std::size_t) { ++blocks_; });
  }
  void encodeBody(const float* v, std::string& body) override {
    const std::size_t start = body.size();
    body.resize(start + maxBodyBytes());
    char* out = body.data() + start;
    unsigned char* packed = reinterpret_cast<unsigned char*>(out + blocks_ * sizeof(float));
    std::memset(packed, 0, (count() + 1) / 2);
    forEachBlockOf(shapes(), kBlock, [&](std::size_t begin, std::size_t end, std::size_t b) {
      float maxAbs = 0;
      for (std::size_t i = begin; i < end; ++i) maxAbs = std::max(maxAbs, std::fabs(v[i]));
      if (std::isnan(v[begin]) || !std::isfinite(maxAbs)) maxAbs = NAN;  // decodes to NaN: the update refuses it
      const float scale = maxAbs / 7.0f;
      std::memcpy(out + b * sizeof(float), &scale, sizeof scale);
      for (std::size_t i = begin; i < end; ++i) {
        const float q = scale > 0 ? std::clamp(std::nearbyint(v[i] / scale), -7.0f, 7.0f) : 0.0f;
        const unsigned nibble = static_cast<unsigned>(static_cast<int>(q) + 8) & 0xF;
        packed[i / 2] |= static_cast<unsigned char>(i % 2 ? nibble << 4 : nibble);
      }
    });
  }
  void decodeBody(const char* body, std::size_t size, float* out) const override {
    if (size != maxBodyBytes()) throw CodecError(fmt::format("int4 payload of {} bytes for {} values", size, count()));
    const unsigned char* packed = reinterpret_cast<const unsigned char*>(body + blocks_ * sizeof(float));
    forEachBlockOf(shapes(), kBlock, [&](std::size_t begin, std::size_t end, std::size_t b) {
      float scale;
      std::memcpy(&scale, body + b * sizeof(float), sizeof scale);
      for (std::size_t i = begin; i < end; ++i) {
        const int nibble = (i % 2 ? packed[i / 2] >> 4 : packed[i / 2]) & 0xF;
        out[i] = static_cast<float>(nibble - 8) * scale;
      }
    });
  }
  std::size_t maxBodyBytes() const override { return blocks_ * sizeof(float) + (count() + 1) / 2; }
  bool rounds() const override { return true; }

 private:
  std::size_t blocks_ = 0;
};

std::uint64_t getVarint(Reader& in) {
  std::uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const auto byte = in.get<std::uint8_t>();
    value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return value;
  }
  throw CodecError("payload: malformed varint");
}

// topk and randomk: k values (float32) at k distinct indices, sent in increasing order as
// varint gaps (about 1 byte each at 1% density instead of 4); the rest is zero.
class Sparse : public Codec {
 public:
  // topk: the largest magnitudes; else k random elements, rescaled by count / k unless under
  // error feedback (randomk).
  Sparse(const CodecArgs& a, bool topk)
      : Codec(a),
        topk_(topk),
        rescale_(!topk && !a.errorFeedback),
        k_(std::clamp<std::int64_t>(std::llround(a.parameter * static_cast<double>(count())), 1,
                                    std::max<std::int64_t>(1, count()))),
        random_(a.seed) {
  }
  std::int64_t k() const { return k_; }
  void encodeBody(const float* v, std::string& body) override {
    at::Tensor x = wrap(v, count());
    at::Tensor indices, values;
    if (topk_) {  // topk: exactly the k largest magnitudes
      indices = std::get<1>(x.abs().topk(k_, 0, true, false));
      values = x.index_select(0, indices);
    } else {  // randomk: k distinct elements drawn uniformly, scaled to stay unbiased
      std::vector<std::int64_t> all(count());
      std::iota(all.begin(), all.end(), 0);
      for (std::int64_t i = 0; i < k_; ++i) {  // partial Fisher-Yates
        std::uniform_int_distribution<std::int64_t> pick(i, static_cast<std::int64_t>(count()) - 1);
        std::swap(all[i], all[pick(random_)]);
      }
      indices = torch::from_blob(all.data(), {k_}, torch::kInt64).clone();
      values = x.index_select(0, indices);
      if (rescale_) values.mul_(static_cast<double>(count()) / static_cast<double>(k_));
    }
    auto [sorted, order] = indices.sort();
    values = values.index_select(0, order).contiguous();
    body.append(static_cast<const char*>(values.data_ptr()), k_ * 4);
    const std::int64_t* index = sorted.data_ptr<std::int64_t>();
    for (std::int64_t i = 0, previous = -1; i < k_; previous = index[i++]) putVarint(body, index[i] - previous - 1);
  }
  void decodeBody(const char* body, std::size_t size, float* out) const override {
    Reader in{body, size};
    in.need(k_ * 4);
    const char* values = body;
    in.at = k_ * 4;
    std::fill(out, out + count(), 0.0f);
    std::uint64_t index = 0;
    for (std::int64_t i = 0; i < k_; ++i) {
      index += getVarint(in) + (i ? 1 : 0);
      if (index >= count()) throw CodecError(fmt::format("{} payload: index {} out of {}", spec(), index, count()));
      std::memcpy(&out[index], values + 4 * i, 4);
    }
    if (in.at != size) throw CodecError(fmt::format("{} payload has trailing bytes", spec()));
  }
  std::size_t maxBodyBytes() const override { return static_cast<std::size_t>(k_) * (4 + 10); }

 private:
  bool topk_;
  bool rescale_;  // randomk: values x count / k
  std::int64_t k_;
  std::mt19937_64 random_;
};

class PowerSgd : public Codec {
 public:
  explicit PowerSgd(const CodecArgs& a) : Codec(a), rank_(static_cast<int>(a.parameter)) {
    auto generator = at::detail::createCPUGenerator(a.seed);
    for (const auto& shape : this->shapes()) {
      auto [n, m] = matrix(shape);
      q_.push_back(compressed(n, m) ? at::randn({m, rank_}, generator) : at::Tensor());
    }
  }
  void encodeBody(const float* v, std::string& body) override {
    for (std::size_t t = 0; t < shapes().size(); ++t) {
      auto [n, m] = matrix(shapes()[t]);
      at::Tensor x = wrap(v, n * m);
      v += n * m;
      if (!compressed(n, m)) {
        body.append(reinterpret_cast<const char*>(x.data_ptr()), n * m * sizeof(float));
        continue;
      }
      at::Tensor matrixView = x.view({n, m});
      at::Tensor p = std::get<0>(at::linalg_qr(matrixView.mm(q_[t])));  // n x r, orthonormal columns
      at::Tensor q = matrixView.t().mm(p).contiguous();                  // m x r: M ~ P Q^T
      q_[t] = q.clone();  // warm start for the next call
      p = p.contiguous();
      body.append(static_cast<const char*>(p.data_ptr()), p.numel() * sizeof(float));
      body.append(static_cast<const char*>(q.data_ptr()), q.numel() * sizeof(float));
    }
  }
  void decodeBody(const char* body, std::size_t size, float* out) const override {
    Reader in{body, size};
    for (const auto& shape : shapes()) {
      auto [n, m] = matrix(shape);
      if (!compressed(n, m)) {
        in.need(n * m * sizeof(float));
        std::memcpy(out, body + in.at, n * m * sizeof(float));
        in.at += n * m * sizeof(float);
      } else {
        in.need((n + m) * rank_ * sizeof(float));
        at::Tensor p = torch::from_blob(const_cast<char*>(body + in.at), {n, rank_}, torch::kFloat32);
        at::Tensor q = torch::from_blob(const_cast<char*>(body + in.at + n * rank_ * sizeof(float)), {m, rank_}, torch::kFloat32);
        wrap(out, n * m).view({n, m}).copy_(p.mm(q.t()));
        in.at += (n + m) * rank_ * sizeof(float);
      }
      out += n * m;
    }
    if (in.at != size) throw CodecError("powersgd payload has trailing bytes");
  }
  std::size_t maxBodyBytes() const override {
    std::size_t bytes = 0;
    for (const auto& shape : shapes()) {
      auto [n, m] = matrix(shape);
      bytes += (compressed(n, m) ? (n + m) * rank_ : n * m) * sizeof(float);
    }
    return bytes;
  }

 private:
  // A tensor as the matrix PowerSGD factors: first dimension x the rest.
  static std::pair<std::int64_t, std::int64_t> matrix(const std::vector<std::int64_t>& shape) {
    const std::int64_t n = shape.empty() ? 1 : shape[0];
    return {n, n ? numel(shape) / n : 0};
  }
  bool compressed(std::int64_t n, std::int64_t m) const { return n > 1 && m > 1 && (n + m) * rank_ < n * m; }
  std::int64_t rank_;
  std::vector<at::Tensor> q_;
};

}  // namespace

Codec::Codec(const CodecArgs& args) : spec_(args.spec), id_(args.wireId), shapes_(args.shapes), count_(0) {
  for (const auto& shape : shapes_) count_ += static_cast<std::size_t>(numel(shape));
}

// Frame: magic u32 | codec id u8 | tensors u32 | per tensor: dims u8, sizes i64... |
//        body bytes u64 | body | CRC-32 of all of the above.
void Codec::encode(const float* values, std::string& out) {
  const std::size_t start = out.size();
  put(out, kMagic);
  put(out, id_);
  put(out, static_cast<std::uint32_t>(shapes_.size()));
  for (const auto& shape : shapes_) {
    put(out, static_cast<std::uint8_t>(shape.size()));
    for (auto d : shape) put(out, d);
  }
  const std::size_t sizeAt = out.size();
  put(out, std::uint64_t(0));
  const std::size_t bodyAt = out.size();
  encodeBody(values, out);
  const std::uint64_t bodyBytes = out.size() - bodyAt;
  std::memcpy(&out[sizeAt], &bodyBytes, sizeof bodyBytes);
  put(out, static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(out.data() + start), static_cast<uInt>(out.size() - start))));
}

void Codec::decode(const char* data, std::size_t size, float* out) const {
  Reader in{data, size};
  if (in.get<std::uint32_t>() != kMagic) throw CodecError("not a pstrain payload (bad magic)");
  const auto id = in.get<std::uint8_t>();
  if (id != id_) throw CodecError(fmt::format("payload of codec {} where {} was expected (ranks started with different --compress?)", id, spec_));
  const auto tensors = in.get<std::uint32_t>();
  if (tensors != shapes_.size()) throw CodecError(fmt::format("payload of {} tensors, the model has {}", tensors, shapes_.size()));
  for (const auto& shape : shapes_) {
    if (in.get<std::uint8_t>() != shape.size()) throw CodecError("payload tensor shapes differ from the model's");
    for (auto d : shape) {
      if (in.get<std::int64_t>() != d) throw CodecError("payload tensor shapes differ from the model's");
    }
  }
  const auto bodyBytes = in.get<std::uint64_t>();
  in.need(bodyBytes);
  const std::size_t bodyAt = in.at;
  in.at += bodyBytes;
  const std::size_t crcAt = in.at;
  const auto crc = in.get<std::uint32_t>();
  if (in.at != size) throw CodecError(fmt::format("payload of {} bytes has {} trailing bytes", size, size - in.at));
  if (crc != crc32(0, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(crcAt))) {
    throw CodecError(fmt::format("{} payload of {} bytes: checksum mismatch (garbled in transit)", spec_, size));
  }
  decodeBody(data + bodyAt, bodyBytes, out);
}

std::size_t Codec::maxFrameBytes() const {
  std::size_t header = 4 + 1 + 4 + 8 + 4;
  for (const auto& shape : shapes_) header += 1 + 8 * shape.size();
  return header + maxBodyBytes();
}

namespace {

template <typename C>
std::unique_ptr<Codec> make(const CodecArgs& a) {
  return std::make_unique<C>(a);
}

// The class of each row of config::kCodecs, by the row's name.
struct Maker {
  const char* name;
  std::unique_ptr<Codec> (*make)(const CodecArgs&);
};
// clang-format off
const Maker kMakers[] = {
  {config::kRawCodec, make<Raw>},
  {"zlib", make<Zlib>},
  {"fp16", [](const CodecArgs& a) -> std::unique_ptr<Codec> { return std::make_unique<HalfPrecision>(a, torch::kHalf); }},
  {"bf16", [](const CodecArgs& a) -> std::unique_ptr<Codec> { return std::make_unique<HalfPrecision>(a, torch::kBFloat16); }},
  {"int8", make<Int8>},
  {"int4", make<Int4>},
  {"topk", [](const CodecArgs& a) -> std::unique_ptr<Codec> { return std::make_unique<Sparse>(a, true); }},
  {"randomk", [](const CodecArgs& a) -> std::unique_ptr<Codec> { return std::make_unique<Sparse>(a, false); }},
  {"powersgd", make<PowerSgd>},
};
// clang-format on
static_assert(std::size(kMakers) == config::kCodecCount, "one maker per row of config::kCodecs");

}  // namespace

std::unique_ptr<Codec> makeCodec(const std::string& spec, const Shapes& shapes, std::uint64_t seed,
                                 const std::string& flag, bool errorFeedback) {
  const config::CodecInfo& row = config::checkedCodec(spec, false, flag);
  for (const Maker& maker : kMakers) {
    if (std::strcmp(maker.name, row.name) == 0) {
      return maker.make({spec, row.wireId, shapes, config::codecParameter(spec, flag), seed, errorFeedback});
    }
  }
  throw InternalError(fmt::format("codec '{}' has a row and no maker", row.name));
}

namespace {
constexpr std::size_t kResidualBlock = 64;  // values a scale of a compact residual
// Bytes a value of a compact residual: its code, and its share of its block's scale.
constexpr double kCompactResidualBytes = 1 + static_cast<double>(sizeof(float)) / kResidualBlock;
}  // namespace

template <typename F>
void ErrorFeedbackEncoder::forEachBlock(F&& block) const {
  forEachBlockOf(codec_->shapes(), kResidualBlock, std::forward<F>(block));
}

ErrorFeedbackEncoder::ErrorFeedbackEncoder(std::unique_ptr<Codec> codec, bool errorFeedback)
    : codec_(std::move(codec)), errorFeedback_(errorFeedback) {}

void ErrorFeedbackEncoder::hold() {
  if (!codec_->rounds()) {
    if (residual_.empty()) residual_.assign(codec_->count(), 0.0f);
    return;
  }
  if (!codes_.empty()) return;
  codes_.assign(codec_->count(), 0);
  std::size_t blocks = 0;
  forEachBlock([&](std::size_t, std::size_t, std::size_t) { ++blocks; });
  scales_.assign(blocks, 0.0f);
}

void ErrorFeedbackEncoder::dropResidual() {
  std::vector<float>().swap(residual_);
  std::vector<std::int8_t>().swap(codes_);
  std::vector<float>().swap(scales_);
}

float ErrorFeedbackEncoder::residual(std::size_t i) const {
  if (!residual_.empty()) return residual_[i];
  float value = 0;  // (no error feedback, or nothing held yet: none held back)
  if (codes_.empty()) return value;
  forEachBlock([&](std::size_t begin, std::size_t end, std::size_t b) {
    if (i >= begin && i < end) value = static_cast<float>(codes_[i]) * scales_[b];
  });
  return value;
}

double ErrorFeedbackEncoder::residualBytes() const {
  if (!errorFeedback_) return 0;
  return codec_->rounds() ? kCompactResidualBytes : 4;
}

double residualBytes(const std::string& spec) {
  return makeCodec(spec, {{kResidualBlock}}, 0)->rounds() ? kCompactResidualBytes : 4;
}

double frameBytes(const std::string& spec) {
  constexpr std::int64_t kValues = std::int64_t(1) << 20;
  return static_cast<double>(makeCodec(spec, {{kValues}}, 0)->maxFrameBytes()) / static_cast<double>(kValues);
}

void ErrorFeedbackEncoder::scaleResidual(float factor) {
  for (float& r : residual_) r *= factor;
  for (float& s : scales_) s *= factor;  // every code's value, scaled alike
}

void ErrorFeedbackEncoder::keepCompactly(const float* values) {
  forEachBlock([&](std::size_t begin, std::size_t end, std::size_t b) {
    float largest = 0;
    for (std::size_t i = begin; i < end; ++i) largest = std::max(largest, std::fabs(values[i]));
    if (!std::isfinite(largest) || largest == 0) {  // NaN goes on (the next payload refuses it); zeros stay zeros
      scales_[b] = std::isfinite(largest) ? 0.0f : NAN;
      std::fill(codes_.begin() + static_cast<std::ptrdiff_t>(begin), codes_.begin() + static_cast<std::ptrdiff_t>(end), 0);
      return;
    }
    scales_[b] = largest / 127.0f;
    for (std::size_t i = begin; i < end; ++i) {
      codes_[i] = static_cast<std::int8_t>(std::clamp(std::nearbyint(values[i] / scales_[b]), -127.0f, 127.0f));
    }
  });
}

void ErrorFeedbackEncoder::encode(const float* values, std::string& out) {
  if (!errorFeedback_) return codec_->encode(values, out);
  hold();
  const std::size_t n = codec_->count();
  // What should be sent, and what the frame decodes to, in scratches of this thread's: one
  // for all the encoders of the thread (a diloco worker has one per chunk of the model).
  thread_local std::vector<float> due, decoded;
  if (decoded.size() < n) decoded.resize(n);
  float* sum = residual_.data();
  if (codec_->rounds()) {
    if (due.size() < n) due.resize(n);
    sum = due.data();
    forEachBlock([&](std::size_t begin, std::size_t end, std::size_t b) {
      for (std::size_t i = begin; i < end; ++i) sum[i] = static_cast<float>(codes_[i]) * scales_[b] + values[i];
    });
  } else {
    for (std::size_t i = 0; i < n; ++i) sum[i] += values[i];
  }
  const std::size_t start = out.size();
  codec_->encode(sum, out);
  codec_->decode(out.data() + start, out.size() - start, decoded.data());
  for (std::size_t i = 0; i < n; ++i) sum[i] -= decoded[i];  // what was not
  if (codec_->rounds()) keepCompactly(sum);
}

}  // namespace pstrain::codec
