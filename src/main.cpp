// cuda-agent: one binary for training, evaluating and judging CUDA kernels.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"cuda-agent: agentic RL for CUDA kernel generation"};
  app.require_subcommand(1);
  auto check = cuda_agent::cli::AddCheckCommand(&app);
  auto config = cuda_agent::cli::AddConfigCommand(&app);
  auto worker = cuda_agent::cli::AddWorkerCommand(&app);
  auto generate = cuda_agent::cli::AddGenerateCommand(&app);
  auto train = cuda_agent::cli::AddTrainCommand(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (app.got_subcommand("check")) return check();
  if (app.got_subcommand("config")) return config();
  if (app.got_subcommand("worker")) return worker();
  if (app.got_subcommand("generate")) return generate();
  if (app.got_subcommand("train")) return train();
  return 2;
}
