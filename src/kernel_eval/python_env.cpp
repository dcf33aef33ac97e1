#include "python_env.h"

#include <nlohmann/json.hpp>

#include "cuda_agent/util/subprocess.h"

namespace cuda_agent::kernel_eval {
namespace {

constexpr const char* kProbe = R"PY(
import json, os, sys
out = {"executable": sys.executable,  # not realpath: a venv is found through this path
       "paths": sorted({os.path.realpath(p) for p in [sys.prefix, sys.base_prefix, sys.exec_prefix] + sys.path
                        if p and os.path.isdir(p)})}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.cuda.is_available()
    if out["cuda"]:
        out["device_name"] = torch.cuda.get_device_name(0)
        out["arch"] = "sm_%d%d" % torch.cuda.get_device_capability(0)
except Exception as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
print("CUDA_AGENT_PROBE " + json.dumps(out))
)PY";

}  // namespace

StatusOr<PythonEnv> ProbePython(const std::string& python) {
  auto result = RunCommand({python, "-c", kProbe}, 120);
  if (!result.ok())
    return FailedPrecondition("cannot run the harness Python '" + python + "': " + result.status().message());
  size_t pos = result->output.find("CUDA_AGENT_PROBE ");
  if (result->exit_code != 0 || pos == std::string::npos)
    return FailedPrecondition("the harness Python '" + python + "' failed its probe:\n" + result->output);
  std::string line = result->output.substr(pos + 17);
  line = line.substr(0, line.find('\n'));
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded()) return Internal("unreadable Python probe output: " + line);
  if (j.contains("error"))
    return FailedPrecondition("torch cannot be imported by '" + python + "': " + j["error"].get<std::string>() +
                              " (run scripts/setup.sh)");
  PythonEnv env;
  env.executable = j["executable"];
  for (const auto& p : j["paths"]) env.readable.emplace_back(p.get<std::string>());
  env.torch_version = j["torch"];
  env.cuda_available = j["cuda"];
  env.device_name = j.value("device_name", "cpu");
  env.cuda_arch = j.value("arch", "");
  return env;
}

}  // namespace cuda_agent::kernel_eval
