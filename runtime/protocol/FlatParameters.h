#pragma once
// Parameters and gradients of a module as views into one flat float buffer each, so that
// weights and gradients travel as one message and the optimizer updates one tensor, with no
// per-tensor copies. Layout: module.parameters() order, each tensor contiguous.
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "models/Registry.h"
#include "runtime/codec/Codec.h"

#include <cstdint>
#include <vector>

namespace pstrain::protocol {

// Each parameter's slice of `flat` (1-D, one element per parameter element), shaped like
// the parameter, in module.parameters() order: the layout, in one place. Throws Error when
// `flat` is not exactly that big.
std::vector<at::Tensor> parameterViews(const torch::nn::Module& module, const at::Tensor& flat);

// The parameters' shapes, in the same order: what a codec of the flat buffer needs.
codec::Shapes parameterShapes(const torch::nn::Module& module);

// Rebinds every parameter of `module` to its slice of `flat` (1-D float, one element per
// parameter element, on the module's device), copying the current values in first, except
// a parameter wholly outside `copied` (Net::heldWeights: one that holds no values), whose
// slice keeps `flat`'s own (fresh pages: zeros, taking no memory until written).
// `flat` must outlive the module's use of the parameters.
void bindParameters(torch::nn::Module& module, const at::Tensor& flat, const models::FlatSpan& copied = {});

// Copies the module's weights [begin, begin + into.numel()) of the flat layout into `into`.
void copyWeights(const torch::nn::Module& module, std::int64_t begin, const at::Tensor& into);

// Sets every parameter's .grad to its slice of `flat`, so backward() accumulates in place.
void bindGradients(torch::nn::Module& module, const at::Tensor& flat);

// Call after backward(): copies into `flat` any gradient that autograd stored elsewhere
// instead of accumulating into the bound view, and rebinds it. Cheap when nothing moved.
void collectGradients(torch::nn::Module& module, const at::Tensor& flat);

// The flat gradient cut into buckets for overlapping its reduction with backward (as
// PyTorch DDP does): contiguous [begin, end) ranges of `bucketBytes` (the last may be
// smaller), cut from the buffer's end, since backward produces the gradients roughly in
// reverse parameter order. A parameter may span several buckets: a bigger one is split, so
// that no message, and no temporary MPI holds for one, is bigger than a bucket. A bucket
// is complete once every parameter it overlaps has its gradient. The same model gives the
// same buckets on every rank.
struct Bucket {
  std::int64_t begin = 0, end = 0;
  std::vector<int> parameters;  // indices into module.parameters() of those it overlaps
};
std::vector<Bucket> gradientBuckets(const torch::nn::Module& module, std::int64_t bucketBytes);

// Buckets of the flat gradient at the ranges `spans` ([begin, end), in the order given),
// each with the parameters it overlaps: an exchange's own cut of the gradient (the
// K servers' parts).
std::vector<Bucket> bucketsAt(const torch::nn::Module& module,
                              const std::vector<std::pair<std::int64_t, std::int64_t>>& spans);

// Buffers (BatchNorm running statistics and counters) travel as floats after the weights
// and the gradients: bufferCount is how many, in named_buffers() order.
std::int64_t bufferCount(const torch::nn::Module& module);

// Copies every buffer's values into `flat` (1-D float, bufferCount elements, any device).
void readBuffers(const torch::nn::Module& module, const at::Tensor& flat);

// Sets every buffer from `flat`, converted to the buffer's dtype (counters are rounded).
void writeBuffers(torch::nn::Module& module, const at::Tensor& flat);

}  // namespace pstrain::protocol
