#include "cuda_agent/sandbox/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "cgroup.h"
#include "child.h"
#include "cuda_agent/util/log.h"
#include "mount_table.h"
#include "seccomp_filter.h"

namespace cuda_agent::sandbox {
namespace fs = std::filesystem;
namespace {

constexpr int kNamespaceFlags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
constexpr size_t kCloneStackBytes = 256 << 10;

class SandboxProcess final : public Process {
 public:
  SandboxProcess(pid_t init, int status_fd, int setup_fd, int stdin_fd, int message_fd, std::unique_ptr<Cgroup> cgroup)
      : init_(init),
        status_fd_(status_fd),
        setup_fd_(setup_fd),
        stdin_fd_(stdin_fd),
        message_fd_(message_fd),
        cgroup_(std::move(cgroup)),
        start_(std::chrono::steady_clock::now()) {}

  ~SandboxProcess() override {
    if (!reaped_) {
      Kill();
      int st;
      ::waitpid(init_, &st, 0);
    }
    CloseStdin();
    if (message_fd_ >= 0) ::close(message_fd_);
    ::close(status_fd_);
    ::close(setup_fd_);
  }

  int stdin_fd() const override { return stdin_fd_; }
  int message_fd() const override { return message_fd_; }
  void CloseStdin() override {
    if (stdin_fd_ >= 0) ::close(stdin_fd_);
    stdin_fd_ = -1;
  }

  void Kill() override {
    if (reaped_) return;
    ::kill(init_, SIGKILL);
    if (target_ > 0) ::kill(-target_, SIGKILL);
  }

  StatusOr<ExitInfo> Wait(std::chrono::steady_clock::time_point deadline) override {
    if (reaped_) return info_;
    char buf[8];
    size_t have = status_bytes_;
    std::memcpy(buf, status_buf_, have);
    bool timed_out = false;
    while (have < 8) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      pollfd p{status_fd_, POLLIN, 0};
      int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) continue;
      ssize_t got = ::read(status_fd_, buf + have, 8 - have);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;  // init died without reporting
      have += static_cast<size_t>(got);
      if (have >= 4) std::memcpy(&target_, buf, 4);
    }
    std::memcpy(status_buf_, buf, have);
    status_bytes_ = have;
    if (timed_out) Kill();
    int init_status = 0;
    while (::waitpid(init_, &init_status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    info_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    info_.timed_out = timed_out;
    if (have == 8) {
      int status;
      std::memcpy(&status, buf + 4, 4);
      if (WIFEXITED(status)) info_.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) info_.signal = WTERMSIG(status);
    } else {
      info_.signal = SIGKILL;
    }
    char step = 0;
    if (::read(setup_fd_, &step, 1) == 1) info_.setup_error = SetupStepName(step);
    info_.cpu_limit = info_.signal == SIGXCPU;
    info_.file_size_limit = info_.signal == SIGXFSZ;
    if (cgroup_) {
      info_.oom_killed = cgroup_->OomKilled();
      info_.peak_memory_bytes = cgroup_->PeakMemoryBytes();
      cgroup_.reset();  // kills stragglers, removes the group
    }
    return info_;
  }

 private:
  pid_t init_;
  pid_t target_ = -1;
  int status_fd_;
  int setup_fd_;
  int stdin_fd_;
  int message_fd_;
  std::unique_ptr<Cgroup> cgroup_;
  std::chrono::steady_clock::time_point start_;
  bool reaped_ = false;
  char status_buf_[8] = {};
  size_t status_bytes_ = 0;
  ExitInfo info_;
};

std::string ResolveExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t colon = p.find(':', start);
    std::string dir = p.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return name;
}

bool ProbeNamespaces() {
  std::vector<char> stack(kCloneStackBytes);
  auto fn = [](void*) -> int {
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 1;
    return 0;
  };
  pid_t pid = ::clone(+fn, stack.data() + stack.size(), kNamespaceFlags | SIGCHLD, nullptr);
  if (pid < 0) return false;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::atomic<uint64_t> g_spawn_counter{0};

}  // namespace

std::string ExitInfo::Describe() const {
  if (!setup_error.empty()) return "sandbox setup failed: " + setup_error;
  if (timed_out) return "timed out after " + std::to_string(static_cast<int>(wall_s)) + " s";
  if (oom_killed) return "killed: memory limit exceeded";
  if (cpu_limit) return "killed: CPU time limit exceeded";
  if (file_size_limit) return "killed: file size limit exceeded";
  if (signal != 0) return std::string("killed by signal ") + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
  return "exit " + std::to_string(exit_code);
}

struct Sandbox::Impl {
  std::optional<SeccompFilter> seccomp;
};

Sandbox::Sandbox(config::SandboxConfig config, Isolation isolation)
    : config_(std::move(config)), isolation_(std::move(isolation)), impl_(std::make_shared<Impl>()) {}

StatusOr<std::unique_ptr<Sandbox>> Sandbox::Create(const config::SandboxConfig& config) {
  Isolation iso;
  std::vector<std::string> missing;
  std::optional<SeccompFilter> filter;
  if (config.isolate) {
    bool root = ::geteuid() == 0;
    iso.namespaces = root && ProbeNamespaces();
    if (!iso.namespaces)
      missing.push_back(root ? "namespaces (clone with CLONE_NEWNS|NEWPID|NEWNET failed)"
                             : "namespaces (not running as root)");
    iso.drop_uid = root;
    if (!iso.drop_uid) missing.push_back("uid switch (not running as root)");
    Status cg = Cgroup::Probe();
    iso.cgroups = cg.ok();
    if (!iso.cgroups) missing.push_back("cgroups (" + cg.message() + ")");
    if (config.seccomp) {
      auto built = SeccompFilter::Build();
      iso.seccomp = built.ok();
      if (built.ok())
        filter = std::move(built).value();
      else
        missing.push_back("seccomp (" + built.status().message() + ")");
    } else {
      missing.push_back("seccomp (sandbox.seccomp=false)");
    }
  } else {
    missing.push_back("all isolation (sandbox.isolate=false)");
  }
  if (missing.empty()) {
    iso.description = "full";
  } else {
    std::string what;
    for (const auto& m : missing) what += (what.empty() ? "" : "; ") + m;
    if (config.isolate && !config.allow_weaker)
      return FailedPrecondition("the sandbox cannot isolate candidate code on this host: missing " + what +
                                ". Run as root on a host with namespaces and cgroups, or set "
                                "sandbox.allow_weaker=true to run (and record) a weaker mode");
    iso.description = "weaker: no " + what;
    CA_LOG(kWarn) << "sandbox runs " << iso.description;
  }
  std::unique_ptr<Sandbox> sandbox(new Sandbox(config, iso));
  sandbox->impl_->seccomp = std::move(filter);
  return sandbox;
}

StatusOr<std::unique_ptr<Process>> Sandbox::Spawn(const SpawnSpec& spec) const {
  CA_CHECK(!spec.argv.empty());
  ChildPlan plan;
  plan.namespaces = isolation_.namespaces;
  plan.drop_uid = isolation_.drop_uid;
  plan.seccomp = impl_->seccomp ? &*impl_->seccomp : nullptr;
  plan.uid = static_cast<uid_t>(config_.uid);
  plan.gid = static_cast<gid_t>(config_.gid);
  plan.cpu_s = static_cast<rlim_t>(config_.cpu_time_limit_s);
  plan.fsize_bytes = static_cast<rlim_t>(config_.max_file_size_mb) << 20;
  plan.nofile = static_cast<rlim_t>(config_.max_open_files);
  std::string shm = "size=" + std::to_string(config_.shm_size_mb) + "m,mode=1777";
  plan.shm_options = shm.c_str();

  std::string exe = ResolveExecutable(spec.argv[0]);
  plan.exe = exe.c_str();
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  plan.argv = argv.data();
  plan.envp = envp.data();
  std::string cwd = spec.cwd.string();
  plan.cwd = cwd.empty() ? nullptr : cwd.c_str();

  std::vector<std::string> mount_points, hidden, mkdirs, binds, masked;
  if (plan.namespaces) {
    CA_ASSIGN_OR_RETURN(mount_points, ReadMountPoints());
    for (const auto& h : spec.hidden) hidden.push_back(fs::weakly_canonical(h).string());
    for (const auto& b : spec.binds) {
      std::string path = fs::weakly_canonical(b.path).string();
      if (!fs::is_directory(path)) return InvalidArgument("sandbox bind " + path + " is not a directory");
      binds.push_back(path);
      plan.bind_writable.push_back(b.writable ? 1 : 0);
      // Create the bind target (and its parents) inside the hidden tmpfs.
      for (const auto& h : hidden) {
        if (path.size() > h.size() && path.compare(0, h.size(), h) == 0 && path[h.size()] == '/') {
          fs::path rel = fs::path(path).lexically_relative(h);
          fs::path cur = h;
          for (const auto& part : rel) {
            cur /= part;
            mkdirs.push_back(cur.string());
          }
        }
      }
    }
    {  // hide every GPU but the assigned one
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator("/dev", ec)) {
        std::string name = entry.path().filename().string();
        if (name.rfind("nvidia", 0) != 0 || name.size() <= 6) continue;
        bool digits = std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits) continue;
        if (spec.gpu.has_value() && name == "nvidia" + std::to_string(*spec.gpu)) continue;
        masked.push_back(entry.path().string());
      }
    }
  }
  for (const auto& s : mount_points) plan.remount_ro.push_back(s.c_str());
  for (const auto& s : hidden) plan.hidden.push_back(s.c_str());
  for (const auto& s : mkdirs) plan.mkdirs.push_back(s.c_str());
  for (const auto& s : binds) plan.bind_paths.push_back(s.c_str());
  for (const auto& s : masked) plan.masked_devices.push_back(s.c_str());
  plan.bind_fds.assign(binds.size(), -1);
  plan.bind_fd_paths.assign(binds.size() * 32, 0);

  // Output files, pipes.
  int out_fd = ::open(spec.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err_fd = ::open(spec.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) {
    if (out_fd >= 0) ::close(out_fd);
    if (err_fd >= 0) ::close(err_fd);
    return Internal("cannot create sandbox output files " + spec.stdout_path.string());
  }
  int sync[2], status[2], setup[2], in[2] = {-1, -1}, msg[2] = {-1, -1};
  bool ok = ::pipe2(sync, O_CLOEXEC) == 0 && ::pipe2(status, O_CLOEXEC) == 0 && ::pipe2(setup, O_CLOEXEC) == 0;
  if (spec.pipes) ok = ok && ::pipe2(in, O_CLOEXEC) == 0 && ::pipe2(msg, O_CLOEXEC) == 0;
  if (!ok) return Internal("pipe2 failed: " + std::string(std::strerror(errno)));
  plan.sync_read = sync[0];
  plan.status_write = status[1];
  plan.setup_write = setup[1];
  plan.stdin_read = in[0];
  plan.message_write = msg[1];
  plan.stdout_fd = out_fd;
  plan.stderr_fd = err_fd;
  // The parent's ends must not leak into the child.
  if (in[1] >= 0) ::fcntl(in[1], F_SETFD, FD_CLOEXEC);

  std::unique_ptr<Cgroup> cgroup;
  if (isolation_.cgroups) {
    std::string name = "cuda-agent-" + std::to_string(::getpid()) + "-" + std::to_string(g_spawn_counter++);
    auto cg = Cgroup::Create(name, config_.memory_limit_mb << 20, config_.max_processes);
    if (!cg.ok()) return cg.status();
    cgroup = std::move(cg).value();
  }

  std::vector<char> stack(kCloneStackBytes);
  int flags = SIGCHLD | (plan.namespaces ? kNamespaceFlags : 0);
  pid_t init = ::clone(InitMain, stack.data() + stack.size(), flags, &plan);
  int clone_errno = errno;
  for (int fd : {sync[0], status[1], setup[1], in[0], msg[1], out_fd, err_fd})
    if (fd >= 0) ::close(fd);
  if (init < 0) {
    for (int fd : {sync[1], status[0], setup[0], in[1], msg[0]})
      if (fd >= 0) ::close(fd);
    return Internal("clone failed: " + std::string(std::strerror(clone_errno)));
  }
  if (cgroup) {
    Status attached = cgroup->Attach(init);
    if (!attached.ok()) {
      ::kill(init, SIGKILL);
      ::waitpid(init, nullptr, 0);
      return attached;
    }
  }
  char go = 'g';
  WriteAll(sync[1], &go, 1);
  ::close(sync[1]);
  // Ignore SIGPIPE so a dead child's stdin surfaces as an error, not a signal.
  static std::once_flag sigpipe_once;
  std::call_once(sigpipe_once, [] { ::signal(SIGPIPE, SIG_IGN); });
  ::fcntl(setup[0], F_SETFL, O_NONBLOCK);
  return std::unique_ptr<Process>(new SandboxProcess(init, status[0], setup[0], in[1], msg[0], std::move(cgroup)));
}

}  // namespace cuda_agent::sandbox
