// Containment of hostile processes by the sandbox itself (no torch, no judge).
#include "cuda_agent/sandbox/sandbox.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "common/loopback_listener.h"
#include "cuda_agent/util/file.h"

namespace cuda_agent::sandbox {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the sandbox needs root";
    auto dir = TempDir::Create(fs::temp_directory_path(), "sandbox-test-");
    ASSERT_TRUE(dir.ok());
    dir_.emplace(std::move(dir).value());
    ::chmod(dir_->path().c_str(), 0711);
    work_ = dir_->path() / "work";
    fs::create_directories(work_);
    ASSERT_TRUE(ChownTree(work_, 65534, 65534).ok());
    config_.memory_limit_mb = 256;
    config_.max_processes = 64;
    config_.max_file_size_mb = 8;
    config_.cpu_time_limit_s = 30;
  }

  struct Result {
    ExitInfo exit;
    std::string out, err;
  };

  Result Run(const std::string& script, double timeout_s = 20) {
    auto sandbox = Sandbox::Create(config_);
    EXPECT_TRUE(sandbox.ok()) << sandbox.status().ToString();
    SpawnSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.env = {"PATH=/usr/bin:/bin", "HOME=" + work_.string()};
    spec.cwd = work_;
    spec.hidden = hidden_;
    spec.binds = {{work_, true}};
    spec.stdout_path = dir_->path() / "out.txt";
    spec.stderr_path = dir_->path() / "err.txt";
    spec.pipes = false;
    auto proc = (*sandbox)->Spawn(spec);
    EXPECT_TRUE(proc.ok()) << proc.status().ToString();
    auto exit = (*proc)->Wait(Clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000)));
    EXPECT_TRUE(exit.ok());
    Result r{*exit, ReadFile(spec.stdout_path).value(), ReadFile(spec.stderr_path).value()};
    return r;
  }

  // Processes whose command line contains `needle`, anywhere on the host.
  static int CountProcesses(const std::string& needle) {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::ifstream f(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(f)), {});
      if (cmd.find(needle) != std::string::npos) ++n;
    }
    return n;
  }

  config::SandboxConfig config_;
  std::optional<TempDir> dir_;
  fs::path work_;
  std::vector<fs::path> hidden_;
};

TEST_F(SandboxTest, RunsAsNobodyInItsOwnNamespaces) {
  Result r = Run("id -u; hostname; ls /proc | grep -c '^[0-9]'; cat /proc/net/dev | grep -c ':'");
  ASSERT_EQ(r.exit.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string uid, host, pids, ifaces;
  lines >> uid >> host >> pids >> ifaces;
  EXPECT_EQ(uid, "65534");
  EXPECT_EQ(host, "sandbox");
  EXPECT_LE(std::stoi(pids), 6) << "host processes visible";
  EXPECT_EQ(ifaces, "1") << "only the loopback interface";
}

TEST_F(SandboxTest, WritesOnlyInsideTheWorkDir) {
  fs::path outside = fs::temp_directory_path() / ("escape-" + std::to_string(::getpid()));
  Result r = Run("echo x > " + outside.string() + "; echo $?; echo y > " + (work_ / "inside").string() + "; echo $?");
  EXPECT_FALSE(fs::exists(outside));
  EXPECT_TRUE(fs::exists(work_ / "inside"));
  EXPECT_NE(r.out.find("2\n0"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("Read-only file system"), std::string::npos) << r.err;
}

TEST_F(SandboxTest, HiddenDirectoriesAreEmpty) {
  fs::path secret = dir_->path() / "secret";
  fs::create_directories(secret);
  std::ofstream(secret / "key") << "hunter2";
  hidden_ = {secret};
  Result r = Run("cat " + (secret / "key").string() + " || echo hidden");
  EXPECT_EQ(r.out, "hidden\n");
}

TEST_F(SandboxTest, NoNetworkEvenToTheHostLoopback) {
  testing::LoopbackListener listener;
  ASSERT_TRUE(listener.ok());
  int port = listener.port();
  Result r = Run("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", " + std::to_string(port) +
                 "), timeout=3)'");
  EXPECT_NE(r.exit.exit_code, 0);
  EXPECT_NE(r.err.find("Operation not permitted"), std::string::npos) << r.err;
  EXPECT_FALSE(listener.Reached()) << "the host listener was reached";
}

TEST_F(SandboxTest, SeccompDeniesNamespaceAndPtraceSyscalls) {
  // unshare(CLONE_NEWNS) and ptrace(PTRACE_TRACEME) both fail with EPERM (errno 1).
  Result r =
      Run("python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); "
          "print(c.unshare(0x20000), ctypes.get_errno()); print(c.ptrace(0, 0, 0, 0), ctypes.get_errno())'");
  EXPECT_EQ(r.out, "-1 1\n-1 1\n") << r.err;
}

TEST_F(SandboxTest, WallClockTimeoutKillsTheWholeTree) {
  auto start = Clock::now();
  Result r = Run("sleep 987651 & sleep 987651 & wait", 1.0);
  EXPECT_TRUE(r.exit.timed_out);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10);
  for (int i = 0; i < 50 && CountProcesses("987651") > 0; ++i) ::usleep(20000);
  EXPECT_EQ(CountProcesses("987651"), 0);
}

TEST_F(SandboxTest, ForkBombIsContained) {
  Result r = Run("i=0; while [ $i -lt 100000 ]; do sleep 987652 & i=$((i+1)); done", 8.0);
  EXPECT_NE(r.err.find("fork"), std::string::npos) << "pids limit never hit: " << r.err.substr(0, 200);
  for (int i = 0; i < 100 && CountProcesses("987652") > 0; ++i) ::usleep(20000);
  EXPECT_EQ(CountProcesses("987652"), 0);
  Result after = Run("echo alive");
  EXPECT_EQ(after.out, "alive\n");
}

TEST_F(SandboxTest, MemoryBombIsKilledByTheCgroup) {
  Result r = Run("python3 -c 'a = []\nwhile True: a.append(bytearray(1 << 26))'");
  EXPECT_TRUE(r.exit.oom_killed) << r.exit.Describe();
  EXPECT_NE(r.exit.exit_code, 0);
}

TEST_F(SandboxTest, FileSizeBombStopsAtTheLimit) {
  Result r = Run("head -c 100000000 /dev/zero > big");
  EXPECT_TRUE(r.exit.file_size_limit || r.exit.exit_code != 0) << r.exit.Describe();
  EXPECT_LE(fs::file_size(work_ / "big"), 8u << 20);
}

TEST_F(SandboxTest, SegfaultAndCpuLimitAreReported) {
  Result seg = Run("exec python3 -c 'import ctypes; ctypes.string_at(0)'");
  EXPECT_EQ(seg.exit.signal, SIGSEGV) << seg.exit.Describe();
  config_.cpu_time_limit_s = 1;
  Result cpu = Run("exec python3 -c 'while True: pass'");
  EXPECT_TRUE(cpu.exit.cpu_limit || cpu.exit.signal == SIGKILL) << cpu.exit.Describe();
}

TEST_F(SandboxTest, SetupFailuresAreReportedNotConfusedWithExitCodes) {
  ::chmod(dir_->path().c_str(), 0700);  // the work dir becomes unreachable for nobody
  Result r = Run("true");
  EXPECT_NE(r.exit.setup_error.find("working directory"), std::string::npos) << r.exit.Describe();
}

// Regression: spawns racing on several threads once leaked each other's pipe
// ends into never-exec'ing init processes, and glibc's setuid broadcast
// deadlocked in cloned children. Every run must finish promptly.
TEST_F(SandboxTest, ConcurrentSpawnsFromManyThreadsAllFinish) {
  auto sandbox = Sandbox::Create(config_);
  ASSERT_TRUE(sandbox.ok());
  std::atomic<int> finished{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 15; ++i) {
        SpawnSpec spec;
        spec.argv = {"/bin/sh", "-c", "read line; echo \"$line\" >&3"};
        spec.env = {"PATH=/usr/bin:/bin"};
        spec.cwd = work_;
        spec.binds = {{work_, true}};
        spec.stdout_path = dir_->path() / ("out" + std::to_string(t));
        spec.stderr_path = dir_->path() / ("err" + std::to_string(t));
        auto proc = (*sandbox)->Spawn(spec);
        if (!proc.ok()) {
          ++failed;
          continue;
        }
        std::string line = "ping\n";
        if (::write((*proc)->stdin_fd(), line.data(), line.size()) != 5) ++failed;
        (*proc)->CloseStdin();
        char buf[16] = {};
        // The reply, then EOF on fd 3 once the tree is gone.
        ssize_t n = ::read((*proc)->message_fd(), buf, sizeof buf);
        auto exit = (*proc)->Wait(Clock::now() + std::chrono::seconds(20));
        if (n != 5 || !exit.ok() || exit->timed_out || exit->exit_code != 0) ++failed;
        ++finished;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(finished.load(), 120);
  EXPECT_EQ(failed.load(), 0);
}

TEST_F(SandboxTest, ExplicitlyUnisolatedModeIsRecorded) {
  config_.isolate = false;
  auto sandbox = Sandbox::Create(config_);
  ASSERT_TRUE(sandbox.ok());
  EXPECT_FALSE((*sandbox)->isolation().Full());
  EXPECT_NE((*sandbox)->isolation().description.find("sandbox.isolate=false"), std::string::npos);
}

}  // namespace
}  // namespace cuda_agent::sandbox
