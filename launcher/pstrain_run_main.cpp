// pstrain-run: the elastic supervisor (launcher/elastic/). It runs mpirun, never links MPI.
#include <fmt/format.h>

#include <iostream>

#include "launcher/elastic/Supervisor.h"
#include "launcher/ErrorLine.h"
#include "runtime/Errors.h"

int main(int argc, char** argv) {
  using namespace pstrain;
  launcher::ElasticOptions options;
  try {
    options = launcher::parseElasticCommand(argc, argv);
  } catch (const ConfigError& e) {
    launcher::printErrorLine(fmt::format("pstrain-run: error: {} (see pstrain-run --help)", e.what()));
    return 2;
  }
  if (!options.helpText.empty()) {
    std::cout << options.helpText;
    return 0;
  }
  try {
    return launcher::superviseElastic(options);
  } catch (const InputError& e) {  // the train dir refused as pstrain refuses it: final, as pstrain's exit 2 is
    launcher::printErrorLine(fmt::format("pstrain-run: error: {}", e.what()));
    return 2;
  } catch (const std::exception& e) {
    launcher::printErrorLine(fmt::format("pstrain-run: error: {}", e.what()));
    return 1;
  }
}
