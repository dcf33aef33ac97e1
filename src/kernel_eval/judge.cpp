#include "cuda_agent/kernel_eval/judge.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "cuda_agent/util/file.h"
#include "cuda_agent/util/log.h"
#include "cuda_agent/util/subprocess.h"
#include "evaluation.h"
#include "python_env.h"

namespace cuda_agent::kernel_eval {
namespace fs = std::filesystem;

namespace {

fs::path DefaultCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "cuda-agent";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "cuda-agent";
  return fs::temp_directory_path() / "cuda-agent-cache";
}

// First line of `command --version` (last line for nvcc), or "" if it cannot run.
std::string VersionOf(const std::vector<std::string>& command, bool last_line) {
  auto r = RunCommand(command, 30);
  if (!r.ok() || r->exit_code != 0) return "";
  std::string out = r->output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  size_t cut = last_line ? out.rfind('\n') : std::string::npos;
  if (last_line) return cut == std::string::npos ? out : out.substr(cut + 1);
  return out.substr(0, out.find('\n'));
}

}  // namespace

StatusOr<std::unique_ptr<Judge>> Judge::Create(const config::JudgeConfig& judge_config,
                                               const config::SandboxConfig& sandbox_config) {
  std::unique_ptr<Judge> judge(new Judge());
  judge->config_ = judge_config;
  CA_ASSIGN_OR_RETURN(judge->sandbox_, sandbox::Sandbox::Create(sandbox_config));
  CA_ASSIGN_OR_RETURN(judge->python_, ProbePython(judge_config.python));

  const std::string& b = judge_config.backend;
  if (b == "auto")
    judge->backend_ = judge->python_.cuda_available ? "cuda" : "cpu";
  else
    judge->backend_ = b;
  if (judge->backend_ == "cuda" && !judge->python_.cuda_available)
    return FailedPrecondition("judge.backend is cuda, but torch sees no GPU on this host (use --backend cpu)");
  if (judge->config_.cuda_arch.empty()) judge->config_.cuda_arch = judge->python_.cuda_arch;

  const char* env_harness = std::getenv("CUDA_AGENT_HARNESS_DIR");
  judge->harness_dir_ = !judge_config.harness_dir.empty() ? fs::path(judge_config.harness_dir)
                        : (env_harness && *env_harness)   ? fs::path(env_harness)
                                                          : fs::path(CUDA_AGENT_HARNESS_DIR);
  if (!fs::is_regular_file(judge->harness_dir_ / "cuda_agent_harness" / "__main__.py"))
    return FailedPrecondition("no harness at " + judge->harness_dir_.string() +
                              " (set judge.harness_dir or CUDA_AGENT_HARNESS_DIR)");
  judge->harness_dir_ = fs::canonical(judge->harness_dir_);

  judge->work_root_ = judge_config.work_dir.empty()
                          ? fs::temp_directory_path() / ("cuda-agent-" + std::to_string(::geteuid()))
                          : fs::path(judge_config.work_dir);
  judge->cache_dir_ = judge_config.cache_dir.empty() ? DefaultCacheDir() : fs::path(judge_config.cache_dir);
  CA_RETURN_IF_ERROR(MakeDirs(judge->work_root_));
  CA_RETURN_IF_ERROR(MakeDirs(judge->cache_dir_));
  judge->work_root_ = fs::canonical(judge->work_root_);
  judge->cache_dir_ = fs::canonical(judge->cache_dir_);
  ::chmod(judge->work_root_.c_str(), 0711);
  judge->baselines_ = std::make_unique<BaselineCache>(judge->cache_dir_ / "baselines");
  judge->toolchain_ = VersionOf({"g++", "--version"}, false);
  if (judge->backend_ == "cuda") {
    const char* cuda_home = std::getenv("CUDA_HOME");
    std::string nvcc = std::string(cuda_home && *cuda_home ? cuda_home : "/usr/local/cuda") + "/bin/nvcc";
    judge->toolchain_ += "; " + VersionOf({nvcc, "--version"}, true) + "; " + judge->config_.cuda_arch;
  }
  CA_LOG(kInfo) << "judge: backend " << judge->backend_ << " (" << judge->python_.device_name << "), torch "
                << judge->python_.torch_version << ", sandbox " << judge->sandbox_->isolation().description;
  return judge;
}

Status Judge::EnsurePch() {
  // While another evaluation builds the header, a compile goes ahead without
  // it (build.py uses it only once it is complete) rather than wait.
  std::unique_lock<std::mutex> lock(pch_mu_, std::try_to_lock);
  if (!lock.owns_lock() || pch_ready_) return Status::Ok();
  CA_RETURN_IF_ERROR(Evaluation::BuildPch(*this));
  pch_ready_ = true;
  return Status::Ok();
}

StatusOr<DeviceProbe> Judge::ProbeDevice() {
  std::lock_guard<std::mutex> timing_lock(timing_mu_);
  return Evaluation::ProbeDevice(*this);
}

JudgeStats Judge::stats() const {
  return {build_hits_.load(), build_misses_.load(), baseline_hits_.load(), baseline_misses_.load()};
}

StatusOr<Verdict> Judge::Evaluate(const Task& task, const Candidate& candidate, std::function<bool()> cancelled,
                                  Stage stop_after) {
  Evaluation evaluation(*this, task, candidate, stop_after, std::move(cancelled));
  return evaluation.Run();
}

}  // namespace cuda_agent::kernel_eval
