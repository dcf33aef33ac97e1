#include "cgroup.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cuda_agent/util/file.h"

namespace cuda_agent::sandbox {
namespace fs = std::filesystem;
namespace {

constexpr const char* kRoot = "/sys/fs/cgroup";

bool WriteValue(const fs::path& file, const std::string& value) {
  std::ofstream out(file);
  out << value;
  out.flush();
  return static_cast<bool>(out);
}

std::string ReadValue(const fs::path& file) {
  auto text = ReadFile(file);
  return text.ok() ? *text : "";
}

bool IsV2() { return fs::exists(fs::path(kRoot) / "cgroup.controllers"); }

// v2: the directory under which we create sandboxes. Our own cgroup may hold
// processes, which forbids enabling controllers for children, so sandboxes go
// under a sibling "cuda-agent" group with memory and pids enabled.
StatusOr<fs::path> V2Parent() {
  std::string self = ReadValue("/proc/self/cgroup");  // "0::/path\n"
  size_t pos = self.find("0::");
  if (pos == std::string::npos) return FailedPrecondition("no v2 entry in /proc/self/cgroup");
  std::string rel = self.substr(pos + 3);
  rel = rel.substr(0, rel.find('\n'));
  fs::path own = fs::path(kRoot) / fs::path(rel).relative_path();
  fs::path base = own.parent_path();
  if (rel == "/") base = own;
  fs::path parent = base / "cuda-agent";
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return FailedPrecondition("cannot create " + parent.string() + ": " + ec.message());
  std::string controllers = ReadValue(base / "cgroup.subtree_control");
  if (controllers.find("memory") == std::string::npos || controllers.find("pids") == std::string::npos) {
    if (!WriteValue(base / "cgroup.subtree_control", "+memory +pids"))
      return FailedPrecondition("cannot enable memory and pids controllers in " + base.string());
  }
  if (!WriteValue(parent / "cgroup.subtree_control", "+memory +pids"))
    return FailedPrecondition("cannot enable memory and pids controllers in " + parent.string());
  return parent;
}

}  // namespace

Status Cgroup::Probe() {
  auto probe = Create("cuda-agent-probe-" + std::to_string(::getpid()), 64 << 20, 16);
  return probe.ok() ? Status::Ok() : probe.status();
}

StatusOr<std::unique_ptr<Cgroup>> Cgroup::Create(const std::string& name, int64_t memory_bytes, int64_t max_pids) {
  std::unique_ptr<Cgroup> cg(new Cgroup());
  std::error_code ec;
  if (IsV2()) {
    cg->v2_ = true;
    CA_ASSIGN_OR_RETURN(fs::path parent, V2Parent());
    fs::path dir = parent / name;
    fs::create_directory(dir, ec);
    if (ec) return FailedPrecondition("cannot create cgroup " + dir.string() + ": " + ec.message());
    cg->dirs_.push_back(dir);
    if (!WriteValue(dir / "memory.max", std::to_string(memory_bytes)) ||
        !WriteValue(dir / "pids.max", std::to_string(max_pids)))
      return FailedPrecondition("cannot set limits in " + dir.string());
    WriteValue(dir / "memory.swap.max", "0");
    return cg;
  }
  fs::path mem = fs::path(kRoot) / "memory" / name;
  fs::path pids = fs::path(kRoot) / "pids" / name;
  if (!fs::exists(mem.parent_path()) || !fs::exists(pids.parent_path()))
    return FailedPrecondition("no memory or pids cgroup hierarchy under /sys/fs/cgroup");
  fs::create_directory(mem, ec);
  if (ec) return FailedPrecondition("cannot create cgroup " + mem.string() + ": " + ec.message());
  cg->dirs_.push_back(mem);
  fs::create_directory(pids, ec);
  if (ec) return FailedPrecondition("cannot create cgroup " + pids.string() + ": " + ec.message());
  cg->dirs_.push_back(pids);
  if (!WriteValue(mem / "memory.limit_in_bytes", std::to_string(memory_bytes)) ||
      !WriteValue(pids / "pids.max", std::to_string(max_pids)))
    return FailedPrecondition("cannot set limits in " + mem.string());
  // Without swap accounting this file is absent; the memory limit then covers RAM only.
  WriteValue(mem / "memory.memsw.limit_in_bytes", std::to_string(memory_bytes));
  return cg;
}

Cgroup::~Cgroup() {
  for (const auto& dir : dirs_) {
    for (int attempt = 0; attempt < 50; ++attempt) {
      std::istringstream procs(ReadValue(fs::path(dir) / "cgroup.procs"));
      bool any = false;
      pid_t pid;
      while (procs >> pid) {
        ::kill(pid, SIGKILL);
        any = true;
      }
      if (!any && ::rmdir(dir.c_str()) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

Status Cgroup::Attach(pid_t pid) {
  for (const auto& dir : dirs_) {
    if (!WriteValue(fs::path(dir) / "cgroup.procs", std::to_string(pid)))
      return Internal("cannot move pid " + std::to_string(pid) + " into " + dir);
  }
  return Status::Ok();
}

bool Cgroup::OomKilled() const {
  if (dirs_.empty()) return false;
  std::string events = ReadValue(fs::path(dirs_[0]) / (v2_ ? "memory.events" : "memory.oom_control"));
  size_t pos = events.find("oom_kill ");
  if (pos == std::string::npos) return false;
  return std::atoll(events.c_str() + pos + 9) > 0;
}

int64_t Cgroup::PeakMemoryBytes() const {
  if (dirs_.empty()) return -1;
  std::string v = ReadValue(fs::path(dirs_[0]) / (v2_ ? "memory.peak" : "memory.max_usage_in_bytes"));
  return v.empty() ? -1 : std::atoll(v.c_str());
}

}  // namespace cuda_agent::sandbox
