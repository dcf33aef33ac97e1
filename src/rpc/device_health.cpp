#include "device_health.h"

#include <sstream>

#include "cuda_agent/util/log.h"
#include "cuda_agent/util/subprocess.h"

namespace cuda_agent::rpc {
namespace {

// MiB of GPU `index` in use that no live process holds, or -1 when nvidia-smi
// cannot say (not installed, or a query it does not know).
int64_t OrphanedGpuMemoryMb(int64_t index) {
  auto gpu = RunCommand({"nvidia-smi", "--query-gpu=uuid,memory.used", "--format=csv,noheader,nounits", "-i",
                         std::to_string(index)},
                        30);
  if (!gpu.ok() || gpu->exit_code != 0) return -1;
  std::string uuid;
  int64_t used = 0;
  {
    std::istringstream line(gpu->output);
    std::getline(line, uuid, ',');
    if (!(line >> used)) return -1;
  }
  auto apps = RunCommand({"nvidia-smi", "--query-compute-apps=gpu_uuid,used_memory", "--format=csv,noheader,nounits"},
                         30);
  if (!apps.ok() || apps->exit_code != 0) return -1;
  int64_t held = 0;
  std::istringstream lines(apps->output);
  for (std::string row; std::getline(lines, row);) {
    size_t comma = row.find(',');
    if (comma == std::string::npos || row.substr(0, comma) != uuid) continue;
    try {
      held += std::stoll(row.substr(comma + 1));
    } catch (const std::exception&) {  // "[N/A]": not visible to us; assume held
      return -1;
    }
  }
  return used - held;
}

bool MentionsCudaFault(const std::string& text) {
  for (const char* marker : {"CUDA error", "illegal memory access", "unspecified launch failure", "device-side assert",
                             "CUBLAS_STATUS", "cudaError", "ECC", "misaligned address", "illegal instruction"})
    if (text.find(marker) != std::string::npos) return true;
  return false;
}

}  // namespace

DeviceHealth::DeviceHealth(std::shared_ptr<kernel_eval::Judge> judge, const config::WorkerConfig& config)
    : judge_(std::move(judge)), config_(config) {
  Probe("start-up");
  rechecker_ = std::thread([this] {
    auto period = std::chrono::milliseconds(static_cast<int64_t>(config_.quarantine_recheck_s * 1000));
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
      if (reason_.empty()) continue;
      lock.unlock();
      Probe("recheck of a quarantined device");
      lock.lock();
    }
  });
}

DeviceHealth::~DeviceHealth() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  rechecker_.join();
}

std::string DeviceHealth::QuarantineReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

bool DeviceHealth::Suspect(const kernel_eval::Verdict* verdict) {
  std::lock_guard<std::mutex> lock(mu_);
  ++since_probe_;
  if (config_.health_probe_every > 0 && since_probe_ >= config_.health_probe_every) return true;
  if (verdict == nullptr) return true;
  if (judge_->backend() != "cuda") return false;
  using kernel_eval::Outcome;
  if (verdict->outcome == Outcome::kTimeout) return true;
  return verdict->outcome == Outcome::kRuntimeError &&
         (MentionsCudaFault(verdict->run_log) || MentionsCudaFault(verdict->message));
}

std::string DeviceHealth::Check() {
  auto probe = judge_->ProbeDevice();
  if (!probe.ok()) return "the device probe could not run: " + probe.status().message();
  if (!probe->ok) return "the device probe failed: " + probe->message;
  if (config_.min_free_memory_mb > 0 && probe->free_mb < config_.min_free_memory_mb)
    return std::to_string(probe->free_mb) + " MiB free, below worker.min_free_memory_mb=" +
           std::to_string(config_.min_free_memory_mb);
  if (judge_->backend() == "cuda") {
    int64_t orphaned = OrphanedGpuMemoryMb(judge_->config().device);
    if (orphaned > config_.gpu_memory_slack_mb)
      return std::to_string(orphaned) + " MiB of GPU memory is held by no process (worker.gpu_memory_slack_mb=" +
             std::to_string(config_.gpu_memory_slack_mb) + ")";
  }
  return "";
}

std::string DeviceHealth::Probe(const std::string& why) {
  std::string reason = Check();
  std::lock_guard<std::mutex> lock(mu_);
  since_probe_ = 0;
  if (reason != reason_) {
    if (reason.empty())
      CA_LOG(kInfo) << "device healthy again (" << why << "); quarantine lifted";
    else
      CA_LOG(kWarn) << "device quarantined after " << why << ": " << reason;
  }
  reason_ = reason;
  return reason;
}

}  // namespace cuda_agent::rpc
