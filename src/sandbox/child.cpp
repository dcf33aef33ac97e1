#include "child.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace cuda_agent::sandbox {

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

namespace {

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

}  // namespace

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

}  // namespace cuda_agent::sandbox
