#include "runtime/loss/Loss.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "runtime/Errors.h"
#include "runtime/config/Losses.h"
#include "runtime/config/RunPlan.h"

namespace pstrain::loss {
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

namespace {

using Reduction = at::Reduction::Reduction;

// nll on log-probabilities (cross-entropy's are log_softmax of logits), over the last
// dimension of every position when the targets are [B, L].
at::Tensor classLoss(const char* name, bool logits, const at::Tensor& output, const at::Tensor& target,
                     std::int64_t ignoreIndex, Reduction reduction) {
  at::Tensor scores = output, labels = target;
  if (target.dim() > 1) {  // one target per position: the classes are the output's last dimension
    if (output.dim() != target.dim() + 1 || output.sizes().slice(0, target.dim()) != target.sizes()) {
      throw Error(fmt::format("--loss {}: the model's output {} does not fit the targets {} (expected [{}, C])",
                              name, shapeOf(output), shapeOf(target), fmt::join(target.sizes(), ", ")));
    }
    scores = output.flatten(0, -2);
    labels = target.flatten();
  }
  if (logits) scores = torch::log_softmax(scores, 1);
  return torch::nll_loss(scores, labels, {}, reduction, ignoreIndex);
}

at::Tensor meanSquaredError(const at::Tensor& output, const at::Tensor& target, Reduction reduction) {
  at::Tensor out = output;
  if (out.dim() == 2 && out.size(1) == 1 && target.dim() == 1) out = out.squeeze(1);
  if (out.sizes() != target.sizes()) {
    throw Error(fmt::format("--loss mse: the model's output {} does not match the targets {}", shapeOf(output),
                            shapeOf(target)));
  }
  return torch::mse_loss(out, target, reduction);
}

using LossFunction = at::Tensor (*)(const at::Tensor& output, const at::Tensor& target, std::int64_t ignoreIndex,
                                    Reduction reduction);

// The function of each row of config/Losses.h: one line per loss.
const std::pair<config::LossKind, LossFunction> kLosses[] = {
    {config::LossKind::CrossEntropy, [](const at::Tensor& o, const at::Tensor& t, std::int64_t ignore, Reduction r) {
       return classLoss("cross-entropy", true, o, t, ignore, r); }},
    {config::LossKind::Nll, [](const at::Tensor& o, const at::Tensor& t, std::int64_t ignore, Reduction r) {
       return classLoss("nll", false, o, t, ignore, r); }},
    {config::LossKind::Mse, [](const at::Tensor& o, const at::Tensor& t, std::int64_t, Reduction r) { return meanSquaredError(o, t, r); }},
};

}  // namespace

at::Tensor lossOf(const std::string& loss, const at::Tensor& output, const at::Tensor& target, std::int64_t ignoreIndex,
                  bool sum) {
  const config::LossInfo& row = config::lossInfo(loss);
  for (const auto& [kind, function] : kLosses) {
    if (row.kind == kind) return function(output, target, ignoreIndex, sum ? at::Reduction::Sum : at::Reduction::Mean);
  }
  throw InternalError(fmt::format("loss '{}' has a row but no function in loss/Loss.cpp", row.name));
}

at::Tensor batchLoss(models::Net& model, const std::string& loss, const at::Tensor& input, const at::Tensor& target,
                     std::int64_t ignoreIndex) {
  if (config::lossInfo(loss).own) return model.forwardWithTargets(input, target).loss;
  return lossOf(loss, model.forward(input), target, ignoreIndex);
}

std::string lossForModel(const std::string& loss, const std::string& byTargets, const models::Net& model,
                         const std::string& modelName) {
  const bool automatic = loss == config::kAuto;
  if (model.computesOwnLoss()) {
    if (automatic || config::isModelLoss(loss)) return config::kModelLoss;
    throw ConfigError(fmt::format("--loss {}: --model {} computes its own loss (its {} takes the targets), and pstrain "
                                  "trains it with that loss: leave --loss out (or --loss {}), or export a model whose "
                                  "forward(x) returns its outputs", loss, modelName, model.forwardSignature(),
                                  config::kModelLoss));
  }
  if (config::isModelLoss(loss)) {
    const std::string declared = model.forwardSignature();
    throw ConfigError(fmt::format("--loss {}: --model {} computes no loss of its own ({}takes no targets); give it a "
                                  "forward(x, y) that returns its loss, or choose --loss {}", loss, modelName,
                                  declared.empty() ? "it " : "its " + declared + " ", config::lossNames()));
  }
  if (!automatic) return loss;
  return byTargets.empty() ? config::defaultLoss(modelName) : byTargets;
}

namespace {

// checkModelFitsData for a model that computes its own loss: its forward(x, y) on the two
// samples gives one scalar, which backward takes.
void checkOwnLoss(models::Net& model, const std::string& where, const at::Tensor& input, const at::Tensor& target,
                  c10::Device device) {
  try {
    model.forwardWithTargets(input.to(device), target.to(device)).loss.backward();
  } catch (const Error& e) {  // the model's own words on what its forward returned
    model.train();
    throw ConfigError(fmt::format("{}: {}", where, e.what()));
  } catch (const std::exception& e) {
    model.train();
    throw ConfigError(fmt::format("{}: the model computes its own loss, and its {} fails on inputs {} and targets {} "
                                  "({})", where, model.forwardSignature(), shapeOf(input), shapeOf(target),
                                  essence(e.what())));
  }
}

}  // namespace

void checkModelFitsData(models::Net& model, const std::string& modelName, const data::Dataset& data,
                        const std::string& loss, c10::Device device) {
  std::vector<std::int64_t> two = {0, std::min<std::int64_t>(1, data.size() - 1)};
  auto [input, target] = data.batch(two);
  const std::string where = fmt::format("--model {} on --dataset {}", modelName, data.name);
  if (data.ids) input.view(-1)[0] = data.maxId;  // the largest id goes through the model once
  if (config::lossInfo(loss).own) {
    model.eval();
    checkOwnLoss(model, where, input, target, device);
    for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
    model.train();
    return;
  }
  const bool classes = config::lossInfo(loss).classTargets;
  if (classes && data.classes == 0) {
    throw ConfigError(fmt::format("{}: the dataset has float targets, not class labels: use --loss mse (or --loss "
                                  "auto)", where));
  }
  if (!classes && data.classes > 0) {
    throw ConfigError(fmt::format("{}: --loss {} needs float targets, the dataset has {} classes", where, loss, data.classes));
  }
  model.eval();
  at::Tensor output;
  try {
    output = model.forward(input.to(device));
  } catch (const Error& e) {  // the model's own words on what its forward returned
    model.train();
    throw ConfigError(fmt::format("{}: {}", where, e.what()));
  } catch (const std::exception& e) {
    model.train();
    const std::string declared = model.forwardSignature();
    const std::string forward = declared.empty() ? "forward" : declared;
    if (data.ids) {
      throw ConfigError(fmt::format("{}: the model's {} fails on a batch of int64 token ids of shape {} whose "
                                    "largest is the data's largest id, {} ({}): the model must take ids (an embedding "
                                    "of at least {} rows); pixels or values go in x as uint8 or float32",
                                    where, forward, shapeOf(input), data.maxId, essence(e.what()), data.maxId + 1));
    }
    throw ConfigError(fmt::format("{}: the model's {} fails on a batch of shape {} ({}); the dataset's samples "
                                  "are {} each{}", where, forward, shapeOf(input), essence(e.what()), shapeOf(input[0]),
                                  model.fileIdentity().empty() ? "" : ". A traced model keeps the shapes and device it "
                                                                      "was traced with: export with torch.jit.script"));
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

}  // namespace pstrain::loss
