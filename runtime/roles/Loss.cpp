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

at::Tensor lossOf(const std::string& loss, const at::Tensor& output, const at::Tensor& target, std::int64_t ignoreIndex,
                  bool sum) {
  const auto reduction = sum ? at::Reduction::Sum : at::Reduction::Mean;
  if (loss == "nll" || loss == "cross-entropy") {
    at::Tensor scores = output, labels = target;
    if (target.dim() > 1) {  // one target per position: the classes are the output's last dimension
      if (output.dim() != target.dim() + 1 || output.sizes().slice(0, target.dim()) != target.sizes()) {
        throw Error(fmt::format("--loss {}: the model's output {} does not fit the targets {} (expected [{}, C])",
                                loss, shapeOf(output), shapeOf(target), fmt::join(target.sizes(), ", ")));
      }
      scores = output.flatten(0, -2);
      labels = target.flatten();
    }
    if (loss == "cross-entropy") scores = torch::log_softmax(scores, 1);
    return torch::nll_loss(scores, labels, {}, reduction, ignoreIndex);
  }
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
    throw ConfigError(fmt::format("{}: the dataset has float targets, not class labels: use --loss mse (or --loss "
                                  "auto)", where));
  }
  if (!classes && data.classes > 0) {
    throw ConfigError(fmt::format("{}: --loss mse needs float targets, the dataset has {} classes", where, data.classes));
  }
  if (data.ids) input.view(-1)[0] = data.maxId;  // the largest id goes through the model once
  model.eval();
  at::Tensor output;
  try {
    output = model.forward(input.to(device));
  } catch (const std::exception& e) {
    model.train();
    if (data.ids) {
      throw ConfigError(fmt::format("{}: the model's forward fails on a batch of int64 token ids of shape {} whose "
                                    "largest is the data's largest id, {} ({}): the model must take ids (an embedding "
                                    "of at least {} rows); pixels or values go in x as uint8 or float32",
                                    where, shapeOf(input), data.maxId, essence(e.what()), data.maxId + 1));
    }
    throw ConfigError(fmt::format("{}: the model's forward fails on a batch of shape {} ({}); the dataset's samples "
                                  "are {} each. A traced model keeps the shapes and device it was traced with: "
                                  "export with torch.jit.script", where, shapeOf(input), essence(e.what()),
                                  shapeOf(input[0])));
  }
  if (classes) {
    // [2, C] for a label per sample; [2, L, C] for one per position, where C may exceed
    // the classes the data holds (a vocabulary of which the data uses a part).
    const bool perPosition = target.dim() > 1;
    std::vector<std::int64_t> expected(target.sizes().begin(), target.sizes().end());
    expected.push_back(perPosition ? output.size(-1) : data.classes);
    const std::int64_t c = output.dim() > 0 ? output.size(-1) : 0;
    if (output.sizes() != at::IntArrayRef(expected) || (perPosition && c < data.classes)) {
      model.train();
      throw ConfigError(fmt::format(
          "{}: the model's output is {} for a batch of 2, but the targets are {}{} (expected [{}, {}])", where,
          shapeOf(output), shapeOf(target),
          perPosition ? fmt::format(" with classes (ids) up to {}", data.classes - 1)
                      : fmt::format(" of {} classes", data.classes),
          fmt::join(target.sizes(), ", "), perPosition ? fmt::format("C >= {}", data.classes) : std::to_string(data.classes)));
    }
  }
  try {
    lossOf(loss, output, target.to(device), data.ignoreIndex).backward();
  } catch (const std::exception& e) {
    model.train();
    throw ConfigError(fmt::format("{}: --loss {} or its backward fails on the model's output {} ({})", where, loss,
                                  shapeOf(output), essence(e.what())));
  }
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  model.train();
}

}  // namespace pstrain::roles
