#pragma once
// Gradient and weight codecs (DESIGN.md: runtime/codec), one class each; what each is (name,
// wire id, parameter, fit for weights, error feedback by default) is its row of
// config::kCodecs (config/Codecs.h), which also checks specs. A codec turns the flat float buffer of a model's tensors into a payload and back:
//   none, zlib[:LEVEL]          lossless
//   fp16, bf16                  half-precision floats
//   int8                        one scale per tensor, values rounded to [-127, 127]
//   int4                        one scale per block of 64 values, values rounded to [-7, 7]
//   topk:RATIO                  the k = RATIO x count largest magnitudes, as indices + values
//   randomk:RATIO               k random elements, scaled by count / k (an unbiased estimate);
//                               unscaled under error feedback, which needs a contraction
//                               (Stich et al. 2018; the scaled version makes it diverge)
//   powersgd:RANK               per matrix-shaped tensor a rank-RANK P Q^T (Vogels et al.
//                               2019: one power iteration, P orthogonalised, Q warm-started
//                               from the previous call); tensors where that would not be
//                               smaller travel as raw floats
// Every payload is a frame that names the codec, carries the tensor shapes and ends with a
// CRC-32 of everything before it: a garbled or mismatched payload is a CodecError, never
// wrong weights. No torch in this header.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain::codec {

using Shapes = std::vector<std::vector<std::int64_t>>;  // the tensors of a flat buffer, in order

// What a codec is made from (makeCodec, from the codec's row in Codec.cpp's table): its spec,
// the row's wire id, the buffer's tensors, the spec's parameter (NaN where it gives none),
// a seed for its random choices, and whether it runs under error feedback.
struct CodecArgs {
  std::string spec;
  std::uint8_t wireId = 0;
  Shapes shapes;
  double parameter = 0;
  std::uint64_t seed = 0;
  bool errorFeedback = false;
};

class Codec {
 public:
  virtual ~Codec() = default;

  // The spec it was made from, as given ("topk:0.01").
  const std::string& spec() const { return spec_; }
  std::size_t count() const { return count_; }

  // Appends the frame of `values` (count() floats) to `out`. Not const: topk, randomk and
  // powersgd keep state between calls (a random stream, the warm-start Q).
  void encode(const float* values, std::string& out);

  // Decodes the frame at `data` (made by a codec of the same spec and shapes) into `out`
  // (count() floats, overwritten). Throws CodecError when it is not such a frame.
  void decode(const char* data, std::size_t size, float* out) const;

  // The largest frame encode() can produce.
  std::size_t maxFrameBytes() const;
  // The tensors of the buffers it codes.
  const Shapes& shapes() const { return shapes_; }

  // Whether what it leaves out of each value is under one rounding step of that value's
  // scale (fp16, bf16, int8, int4), so that error feedback's residual, that small beside what
  // it is added to, keeps what matters of itself in int8 codes (ErrorFeedbackEncoder).
  virtual bool rounds() const { return false; }

 protected:
  explicit Codec(const CodecArgs& args);
  virtual void encodeBody(const float* values, std::string& body) = 0;
  virtual void decodeBody(const char* body, std::size_t size, float* out) const = 0;
  virtual std::size_t maxBodyBytes() const = 0;

 private:
  std::string spec_;
  std::uint8_t id_;
  Shapes shapes_;
  std::size_t count_;
};

// Makes the codec of `spec` for buffers of `shapes`; `seed` drives randomk's choices and
// powersgd's first Q; `errorFeedback`: it will run under ErrorFeedbackEncoder (randomk then
// does not rescale). Throws ConfigError naming `flag` for an unknown or malformed spec.
std::unique_ptr<Codec> makeCodec(const std::string& spec, const Shapes& shapes, std::uint64_t seed,
                                 const std::string& flag = "compress", bool errorFeedback = false);

// Bytes a value of error feedback's residual under the codec of `spec`
// (ErrorFeedbackEncoder::residualBytes() of an encoder of it). For the memory plan.
double residualBytes(const std::string& spec);
// Bytes a value of the largest frame of `spec` over one tensor of many values (its headers
// aside). For the memory plan.
double frameBytes(const std::string& spec);

// Encodes gradients with error feedback (Seide et al. 2014; Karimireddy et al. 2019): the
// part of (gradient + residual) that the payload does not carry is kept and added to the
// next gradient, so over many steps the sum of what was sent tracks the sum of gradients.
// The residual is kept in float32, or under a codec that rounds() in int8 codes by blocks of
// 64 values of a tensor (a tensor's last block may be shorter, so that a buffer cut between
// tensors keeps the same blocks), each block with its scale (its largest magnitude / 127):
// about 1.0625 bytes a value, not 4. There it is at most a rounding step, and the codes'
// 1/254 of the block's largest is noise far below the step; a sparsifier's residual grows
// to many steps' sum, whose small increments such codes would lose.
class ErrorFeedbackEncoder {
 public:
  ErrorFeedbackEncoder(std::unique_ptr<Codec> codec, bool errorFeedback);
  // Appends the frame of `values` (+ residual) to `out`.
  void encode(const float* values, std::string& out);
  const Codec& codec() const { return *codec_; }
  // What is held back of value i for the next payload.
  float residual(std::size_t i) const;
  // Bytes a value of its residual: 0 (no error feedback), 1.0625 or 4.
  double residualBytes() const;
  // Multiplies what is kept for the next payload by `factor`: when the values it was left
  // from are weighted differently from the next ones (a diloco round of other length).
  void scaleResidual(float factor);
  // Gives the residual's memory back, what it held dropped (the next payload starts a new
  // one): diloco's chain of the whole model while its rounds stream fragments, and back.
  // The residual is made, zero, at the first payload.
  void dropResidual();

 private:
  void hold();  // makes the residual where there is none
  // Calls `block(begin, end, b)` for each block of the compact residual, in order.
  template <typename F>
  void forEachBlock(F&& block) const;
  // Keeps `values` (count() floats) as the residual, in codes and scales.
  void keepCompactly(const float* values);

  std::unique_ptr<Codec> codec_;
  bool errorFeedback_;
  std::vector<float> residual_;      // float32, or empty
  std::vector<std::int8_t> codes_;   // a codec that rounds(): the residual's codes, by block
  std::vector<float> scales_;        // and each block's scale
};

}  // namespace pstrain::codec
