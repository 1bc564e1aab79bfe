// Writes, for every model of the zoo but the largest, its state_dict (after one training
// forward, so BatchNorm statistics are not trivial) and an input with the model's eval-mode
// output, for check_twins.py. Usage: export_models DIR
#include <torch/torch.h>

#include <filesystem>
#include <iostream>

#include "models/Registry.h"
#include "models/StateDict.h"
#include "runtime/checkpoint/Checkpoint.h"

using namespace pstrain;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: export_models DIR\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  torch::set_num_threads(1);
  for (const auto& info : models::modelList()) {
    if (info.name == "resnet101" || info.name == "resnet152" || info.name == "vgg19") continue;
    torch::manual_seed(1);
    auto model = models::makeModel(info.name);
    std::vector<std::int64_t> shape = {4};
    shape.insert(shape.end(), info.inputShape.begin(), info.inputShape.end());
    torch::NoGradGuard noGrad;
    model->train();
    model->forward(torch::randn(shape) * 2 + 0.5);
    model->eval();
    at::Tensor input = torch::randn(shape);
    at::Tensor output = model->forward(input);
    checkpoint::writeStateDict((dir / (info.name + ".pt")).string(), models::stateDict(*model));
    checkpoint::writeStateDict((dir / (info.name + ".io.pt")).string(), {{"input", input}, {"output", output}});
    std::cout << info.name << "\n";
  }
  return 0;
}
