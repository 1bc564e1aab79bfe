#include "runtime/roles/Loss.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "runtime/Errors.h"

namespace pstrain::roles {
namespace {

std::string shapeOf(const at::Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ", ")); }

// The line of an error that says what went wrong: a TorchScript error is a traceback that
// ends with it ("RuntimeError: ..."); others say it first.
std::string essence(const std::string& text) {
  const auto at = text.rfind("RuntimeError: ");
  const std::string tail = at == std::string::npos ? text : text.substr(at + 14);
  return tail.substr(0, tail.find('\n'));
}

}  // namespace

at::Tensor lossOf(const std::string& loss, const at::Tensor& output, const at::Tensor& target, bool sum) {
  const auto reduction = sum ? at::Reduction::Sum : at::Reduction::Mean;
  if (loss == "nll") return torch::nll_loss(output, target, {}, reduction);
  if (loss == "cross-entropy") return torch::nll_loss(torch::log_softmax(output, 1), target, {}, reduction);
  at::Tensor out = output;
  if (out.dim() == 2 && out.size(1) == 1 && target.dim() == 1) out = out.squeeze(1);
  if (out.sizes() != target.sizes()) {
    throw Error(fmt::format("--loss mse: the model's output {} does not match the targets {}", shapeOf(output),
                            shapeOf(target)));
  }
  return torch::mse_loss(out, target, reduction);
}

void checkModelFitsData(models::Net& model, const std::string& modelName, const data::Dataset& data,
                        const std::string& loss, c10::Device device) {
  std::vector<std::int64_t> two = {0, std::min<std::int64_t>(1, data.size() - 1)};
  auto [input, target] = data.batch(two);
  const std::string where = fmt::format("--model {} on --dataset {}", modelName, data.name);
  const bool classes = loss != "mse";
  if (classes && data.classes == 0) {
    throw ConfigError(fmt::format("{}: the dataset has float targets, not class labels: use --loss mse", where));
  }
  if (!classes && data.classes > 0) {
    throw ConfigError(fmt::format("{}: --loss mse needs float targets, the dataset has {} classes", where, data.classes));
  }
  model.eval();
  at::Tensor output;
  try {
    output = model.forward(input.to(device));
  } catch (const std::exception& e) {
    model.train();
    throw ConfigError(fmt::format("{}: the model's forward fails on a batch of shape {} ({}); the dataset's samples "
                                  "are {} each. A traced model keeps the shapes and device it was traced with: "
                                  "export with torch.jit.script", where, shapeOf(input), essence(e.what()),
                                  shapeOf(input[0])));
  }
  if (classes && (output.dim() != 2 || output.size(0) != 2 || output.size(1) != data.classes)) {
    model.train();
    throw ConfigError(fmt::format("{}: the model's output is {} for a batch of 2, but the dataset has {} classes "
                                  "(expected [2, {}])", where, shapeOf(output), data.classes, data.classes));
  }
  try {
    lossOf(loss, output, target.to(device)).backward();
  } catch (const std::exception& e) {
    model.train();
    throw ConfigError(fmt::format("{}: --loss {} or its backward fails on the model's output {} ({})", where, loss,
                                  shapeOf(output), essence(e.what())));
  }
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  model.train();
}

}  // namespace pstrain::roles
