#include "seccomp_filter.h"

#include <errno.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/mman.h>

namespace cuda_agent::sandbox {

StatusOr<SeccompFilter> SeccompFilter::Build() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return FailedPrecondition("seccomp_init failed");
  static const char* kDenied[] = {"ptrace",
                                  "process_vm_readv",
                                  "process_vm_writev",
                                  "mount",
                                  "umount",
                                  "umount2",
                                  "pivot_root",
                                  "chroot",
                                  "unshare",
                                  "setns",
                                  "bpf",
                                  "perf_event_open",
                                  "init_module",
                                  "finit_module",
                                  "delete_module",
                                  "kexec_load",
                                  "kexec_file_load",
                                  "reboot",
                                  "swapon",
                                  "swapoff",
                                  "add_key",
                                  "request_key",
                                  "keyctl",
                                  "userfaultfd",
                                  "open_by_handle_at",
                                  "name_to_handle_at",
                                  "fanotify_init",
                                  "acct",
                                  "settimeofday",
                                  "clock_settime",
                                  "clock_adjtime",
                                  "adjtimex",
                                  "syslog",
                                  "iopl",
                                  "ioperm",
                                  "fsopen",
                                  "fsmount",
                                  "move_mount",
                                  "open_tree"};
  int rc = 0;
  for (const char* name : kDenied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
  }
  // Only unix-domain sockets: no TCP/UDP/raw/netlink even if a namespace leaks.
  rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  if (rc != 0) {
    seccomp_release(ctx);
    return Internal("seccomp_rule_add failed");
  }
  // Export the BPF program through an in-memory file.
  int fd = ::memfd_create("seccomp-bpf", MFD_CLOEXEC);
  if (fd < 0) {
    seccomp_release(ctx);
    return Internal("memfd_create failed");
  }
  rc = seccomp_export_bpf(ctx, fd);
  seccomp_release(ctx);
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (rc != 0 || size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0) {
    ::close(fd);
    return Internal("seccomp_export_bpf failed");
  }
  SeccompFilter filter;
  filter.program_.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  ssize_t got = ::pread(fd, filter.program_.data(), static_cast<size_t>(size), 0);
  ::close(fd);
  if (got != size) return Internal("cannot read the exported seccomp program");
  if (filter.program_.empty()) return Internal("seccomp export produced an empty program");
  return filter;
}

int SeccompFilter::Install() const {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -errno;
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(program_.size());
  prog.filter = const_cast<sock_filter*>(program_.data());
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return -errno;
  return 0;
}

}  // namespace cuda_agent::sandbox
