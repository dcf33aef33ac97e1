// `cuda-agent check --task model.py --candidate model_new.py`: judge one
// candidate by hand. Exit code 0 for any verdict, 2 for bad usage or input,
// 1 when the judge itself failed.
#include <iostream>
#include <memory>

#include "commands.h"
#include "cuda_agent/config/config.h"
#include "cuda_agent/kernel_eval/judge.h"
#include "cuda_agent/util/log.h"

namespace cuda_agent::cli {

void AddConfigOptions(CLI::App* command, ConfigOptions* options) {
  command->add_option("--config", options->config_path, "YAML config file (defaults apply to what it leaves out)");
  command->add_option("--set", options->overrides, "override one config value, e.g. --set judge.atol=1e-3")
      ->allow_extra_args(false);
  command->add_flag("--dump-config", options->dump_config, "print the resolved config as YAML and exit");
}

std::optional<int> LoadCommandConfig(const ConfigOptions& options, const std::vector<std::string>& extra_overrides,
                                     config::Config* config) {
  std::vector<std::string> overrides = options.overrides;
  overrides.insert(overrides.end(), extra_overrides.begin(), extra_overrides.end());
  auto loaded = config::LoadConfig(options.config_path, overrides);
  if (!loaded.ok()) return Fail(loaded.status());
  *config = std::move(*loaded);
  if (options.dump_config) {
    std::cout << config::DumpConfig(*config);
    return 0;
  }
  log::Level level;
  if (log::ParseLevel(config->log_level, &level)) log::SetLevel(level);
  return std::nullopt;
}

int Fail(const Status& status) {
  std::cerr << "error: " << status.ToString() << "\n";
  bool usage = status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kNotFound;
  return usage ? 2 : 1;
}

std::function<int()> AddCheckCommand(CLI::App* app) {
  struct Options {
    ConfigOptions config;
    std::string task, candidate, backend, stage = "profile";
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app->add_subcommand("check", "judge one candidate kernel against a task");
  cmd->add_option("--task", opts->task, "task file (KernelBench format: Model, get_inputs, get_init_inputs)")
      ->required();
  cmd->add_option("--candidate", opts->candidate, "ModelNew .py file, or a workspace directory")->required();
  cmd->add_option("--backend", opts->backend, "cuda or cpu (default: judge.backend)")
      ->check(CLI::IsMember({"cuda", "cpu", "auto"}));
  cmd->add_option("--stage", opts->stage, "stop after compile, verify, or profile (the whole evaluation)")
      ->check(CLI::IsMember({"compile", "verify", "profile"}));
  cmd->add_flag("--json", opts->json, "print the full verdict as JSON");
  AddConfigOptions(cmd, &opts->config);
  return [opts]() -> int {
    std::vector<std::string> backend;
    if (!opts->backend.empty()) backend.push_back("judge.backend=" + opts->backend);
    config::Config config;
    if (auto done = LoadCommandConfig(opts->config, backend, &config)) return *done;
    auto task = kernel_eval::LoadTask(opts->task);
    if (!task.ok()) return Fail(task.status());
    auto candidate = kernel_eval::LoadCandidate(opts->candidate);
    if (!candidate.ok()) return Fail(candidate.status());
    auto judge = kernel_eval::Judge::Create(config.judge, config.sandbox);
    if (!judge.ok()) return Fail(judge.status());
    kernel_eval::Stage stage = kernel_eval::Stage::kProfile;
    kernel_eval::ParseStage(opts->stage, &stage);
    auto verdict = (*judge)->Evaluate(*task, *candidate, nullptr, stage);
    if (!verdict.ok()) return Fail(verdict.status());
    if (opts->json)
      std::cout << verdict->ToJson().dump(2) << "\n";
    else
      std::cout << verdict->Summary();
    return 0;
  };
}

std::function<int()> AddConfigCommand(CLI::App* app) {
  auto opts = std::make_shared<ConfigOptions>();
  CLI::App* cmd = app->add_subcommand("config", "validate a config and print it resolved, with comments");
  AddConfigOptions(cmd, opts.get());
  return [opts]() -> int {
    auto config = config::LoadConfig(opts->config_path, opts->overrides);
    if (!config.ok()) return Fail(config.status());
    std::cout << config::DumpConfig(*config);
    return 0;
  };
}

}  // namespace cuda_agent::cli
