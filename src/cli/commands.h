// Subcommands of the cuda-agent binary. Each registers itself on the CLI11 app
// and runs when selected.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cuda_agent/config/config.h"
#include "cuda_agent/util/status.h"

namespace cuda_agent::cli {

// Options every subcommand that reads a config shares.
struct ConfigOptions {
  std::string config_path;             // --config
  std::vector<std::string> overrides;  // --set a.b=c, repeatable
  bool dump_config = false;            // --dump-config: print the resolved config and exit
};

void AddConfigOptions(CLI::App* command, ConfigOptions* options);
// Loads the config `options` name (with `extra_overrides` after the user's)
// into *config and applies its log level. Returns the exit code when the
// command is done already: a bad config, or --dump-config printed it.
std::optional<int> LoadCommandConfig(const ConfigOptions& options, const std::vector<std::string>& extra_overrides,
                                     config::Config* config);

// Registers `check`; the returned function runs it and gives the exit code.
std::function<int()> AddCheckCommand(CLI::App* app);
// Registers `config` (load, validate and print a config).
std::function<int()> AddConfigCommand(CLI::App* app);
// Registers `worker` (serve the judge over gRPC).
std::function<int()> AddWorkerCommand(CLI::App* app);
// Registers `generate` (sample from a checkpoint with the policy's generator).
std::function<int()> AddGenerateCommand(CLI::App* app);
// Registers `train` (the RL training loop).
std::function<int()> AddTrainCommand(CLI::App* app);

// Prints `status` and returns the exit code for it: 2 for bad usage or input, 1 otherwise.
int Fail(const Status& status);

}  // namespace cuda_agent::cli
