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
#include "cuda_agent/util/log.h"
#include "mount_table.h"
#include "seccomp_filter.h"

namespace cuda_agent::sandbox {
namespace fs = std::filesystem;
namespace {

constexpr int kNamespaceFlags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
constexpr size_t kCloneStackBytes = 256 << 10;

// Everything the cloned child needs, prepared before clone() so the child never
// allocates (the parent may be multi-threaded).
struct ChildPlan {
  bool namespaces = false;
  bool drop_uid = false;
  const SeccompFilter* seccomp = nullptr;
  uid_t uid = 65534;
  gid_t gid = 65534;
  int sync_read = -1;     // parent -> init: "cgroup attached, go"
  int status_write = -1;  // init -> parent: target pid, then its wait status
  int setup_write = -1;   // target -> parent: a SetupStep byte if setup failed before exec (close-on-exec)
  int stdin_read = -1, message_write = -1, stdout_fd = -1, stderr_fd = -1;
  const char* exe = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;
  std::vector<const char*> remount_ro;  // host mount points
  std::vector<const char*> hidden;
  std::vector<const char*> mkdirs;  // bind targets to create inside hidden tmpfs
  std::vector<const char*> bind_paths;
  std::vector<char> bind_writable;
  std::vector<int> bind_fds;        // filled in the child
  std::vector<char> bind_fd_paths;  // "/proc/self/fd/N" buffers, 32 bytes each
  std::vector<const char*> masked_devices;
  const char* shm_options = nullptr;
  rlim_t cpu_s = 0, fsize_bytes = 0, nofile = 0;
};

void WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Formats "/proc/self/fd/<fd>" into buf without allocating.
void FdPath(int fd, char* buf) {
  const char* prefix = "/proc/self/fd/";
  size_t i = 0;
  for (; prefix[i]; ++i) buf[i] = prefix[i];
  char digits[16];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + fd % 10);
    fd /= 10;
  } while (fd > 0);
  while (n > 0) buf[i++] = digits[--n];
  buf[i] = 0;
}

[[noreturn]] void Die(int status_fd, int code) {
  // A setup failure: report it as the target's exit so the parent sees it.
  int fake_pid = -1;
  int status = (code & 0xff) << 8;
  WriteAll(status_fd, &fake_pid, sizeof fake_pid);
  WriteAll(status_fd, &status, sizeof status);
  ::_exit(code);
}

// Exit codes the init uses when the sandbox itself could not be set up.
constexpr int kSetupMountFailed = 121;
constexpr int kSetupExecFailed = 127;

// What failed before exec; sent to the parent as one byte.
enum SetupStep : char {
  kStepMounts = 'm',
  kStepPrivileges = 'u',
  kStepChdir = 'd',
  kStepSeccomp = 's',
  kStepExec = 'e'
};

[[noreturn]] void SetupFailed(const ChildPlan* plan, SetupStep step) {
  char c = step;
  WriteAll(plan->setup_write, &c, 1);
  ::_exit(kSetupExecFailed);
}

const char* SetupStepName(char step) {
  switch (step) {
    case kStepMounts:
      return "mounting the sandbox's file system view";
    case kStepPrivileges:
      return "dropping to the sandbox uid/gid";
    case kStepChdir:
      return "entering the working directory (is it reachable by the sandbox uid?)";
    case kStepSeccomp:
      return "installing the seccomp filter";
    case kStepExec:
      return "executing the program (not found or not executable by the sandbox uid?)";
  }
  return "setting up the sandbox";
}

int RunTarget(ChildPlan* plan) {
  ::setsid();
  if (plan->stdin_read >= 0)
    ::dup2(plan->stdin_read, 0);
  else {
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
  }
  ::dup2(plan->stdout_fd, 1);
  ::dup2(plan->stderr_fd, 2);
  if (plan->message_write >= 0) ::dup2(plan->message_write, 3);
  // Everything else closes at exec; the setup pipe must stay usable until then.
  unsigned first = plan->message_write >= 0 ? 4 : 3;
  if (::syscall(SYS_close_range, first, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */) != 0) {
    for (int fd = static_cast<int>(first); fd < 65536; ++fd)
      if (fd != plan->setup_write) ::close(fd);
  }
  rlimit r{};
  r.rlim_cur = r.rlim_max = plan->cpu_s;
  ::setrlimit(RLIMIT_CPU, &r);
  r.rlim_cur = r.rlim_max = plan->fsize_bytes;
  ::setrlimit(RLIMIT_FSIZE, &r);
  r.rlim_cur = r.rlim_max = plan->nofile;
  ::setrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max = 0;
  ::setrlimit(RLIMIT_CORE, &r);
  if (plan->drop_uid) {
    // Raw syscalls: glibc's wrappers would try to broadcast the change to the
    // judge's other threads, which this cloned process inherited only on paper.
    if (::syscall(SYS_setgroups, 0, nullptr) != 0 || ::syscall(SYS_setresgid, plan->gid, plan->gid, plan->gid) != 0 ||
        ::syscall(SYS_setresuid, plan->uid, plan->uid, plan->uid) != 0)
      SetupFailed(plan, kStepPrivileges);
  }
  if (plan->cwd != nullptr && ::chdir(plan->cwd) != 0) SetupFailed(plan, kStepChdir);
  if (plan->seccomp != nullptr && plan->seccomp->Install() != 0) SetupFailed(plan, kStepSeccomp);
  ::execve(plan->exe, plan->argv, plan->envp);
  SetupFailed(plan, kStepExec);
}

int SetUpMounts(ChildPlan* plan) {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return -1;
  for (size_t i = 0; i < plan->bind_paths.size(); ++i) {
    plan->bind_fds[i] = ::open(plan->bind_paths[i], O_PATH | O_CLOEXEC);
    if (plan->bind_fds[i] < 0) return -1;
  }
  for (const char* h : plan->hidden) {
    if (::mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755") != 0) return -1;
  }
  for (const char* d : plan->mkdirs) ::mkdir(d, 0755);
  for (size_t i = 0; i < plan->bind_paths.size(); ++i) {
    char* src = &plan->bind_fd_paths[i * 32];
    FdPath(plan->bind_fds[i], src);
    if (::mount(src, plan->bind_paths[i], nullptr, MS_BIND | MS_REC, nullptr) != 0) return -1;
  }
  for (const char* point : plan->remount_ro) {
    int rc = ::mount(nullptr, point, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, nullptr);
    if (rc != 0 && point[0] == '/' && point[1] == 0) return -1;
  }
  for (const char* h : plan->hidden) ::mount(nullptr, h, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr);
  for (size_t i = 0; i < plan->bind_paths.size(); ++i) {
    if (!plan->bind_writable[i] &&
        ::mount(nullptr, plan->bind_paths[i], nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
      return -1;
  }
  ::mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, plan->shm_options);
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) return -1;
  for (const char* dev : plan->masked_devices) ::mount("/dev/null", dev, nullptr, MS_BIND, nullptr);
  ::sethostname("sandbox", 7);
  return 0;
}

// Closes every descriptor but this sandbox's own. Another thread's Spawn() may
// have had pipes open when we were cloned; an init never execs, so without this
// it would hold their ends open and the other sandbox would never see EOF.
void CloseForeignDescriptors(const ChildPlan* plan) {
  int keep[8] = {plan->sync_read,     plan->status_write, plan->setup_write, plan->stdin_read,
                 plan->message_write, plan->stdout_fd,    plan->stderr_fd,   2};
  for (int i = 1; i < 8; ++i)  // insertion sort, no allocation
    for (int j = i; j > 0 && keep[j - 1] > keep[j]; --j) std::swap(keep[j - 1], keep[j]);
  unsigned next = 3;
  for (int fd : keep) {
    if (fd < static_cast<int>(next)) continue;
    if (static_cast<unsigned>(fd) > next) ::syscall(SYS_close_range, next, static_cast<unsigned>(fd) - 1, 0);
    next = static_cast<unsigned>(fd) + 1;
  }
  ::syscall(SYS_close_range, next, ~0U, 0);
}

int InitMain(void* arg) {
  auto* plan = static_cast<ChildPlan*>(arg);
  CloseForeignDescriptors(plan);
  // If the judge dies, the sandbox dies with it (the kernel then kills the
  // whole pid namespace). Note: tied to the spawning thread's lifetime.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  char go = 0;
  while (::read(plan->sync_read, &go, 1) < 0 && errno == EINTR) {
  }
  if (go != 'g') ::_exit(kSetupMountFailed);
  if (plan->namespaces && SetUpMounts(plan) != 0) {
    char c = kStepMounts;
    WriteAll(plan->setup_write, &c, 1);
    Die(plan->status_write, kSetupMountFailed);
  }
  // A raw clone, not fork(): glibc's fork() takes malloc's locks, which another
  // thread of the judge may have held when this init was cloned.
  pid_t target = static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr));
  if (target < 0) Die(plan->status_write, kSetupExecFailed);
  if (target == 0) RunTarget(plan);
  WriteAll(plan->status_write, &target, sizeof target);
  // Reap everything; report the target's status once it ends. When this init
  // exits, the kernel kills whatever is left in the pid namespace.
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid == target || pid < 0) {
      WriteAll(plan->status_write, &status, sizeof status);
      if (!plan->namespaces) ::kill(-target, SIGKILL);
      ::_exit(0);
    }
  }
}

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
