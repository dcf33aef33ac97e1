#include "harness_process.h"

#include "cuda_agent/util/file.h"

namespace cuda_agent::kernel_eval {

StatusOr<std::unique_ptr<HarnessProcess>> HarnessProcess::Start(const sandbox::Sandbox& sandbox,
                                                                const sandbox::SpawnSpec& spec) {
  CA_ASSIGN_OR_RETURN(auto process, sandbox.Spawn(spec));
  return std::unique_ptr<HarnessProcess>(new HarnessProcess(std::move(process), spec));
}

StatusOr<sandbox::ExitInfo> HarnessProcess::Finish(Clock::time_point deadline) {
  process_->CloseStdin();
  return process_->Wait(deadline);
}

std::string HarnessProcess::LogTail(size_t max_bytes) const {
  auto err = ReadFile(spec_.stderr_path);
  std::string text = err.ok() ? *err : "";
  if (text.empty()) {
    auto out = ReadFile(spec_.stdout_path);
    text = out.ok() ? *out : "";
  }
  return text.size() > max_bytes ? "[...]\n" + text.substr(text.size() - max_bytes) : text;
}

}  // namespace cuda_agent::kernel_eval
