// How an evaluation reaches the outside world: the sandboxed harness
// processes it starts (with their view of the file system), their messages,
// the precompiled header and the build cache. The phases are in evaluation.cpp.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "cuda_agent/util/hash.h"
#include "cuda_agent/util/log.h"
#include "evaluation.h"

namespace cuda_agent::kernel_eval {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool IsUnder(const fs::path& p, const fs::path& root) {
  auto [r, _] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  return r == root.end();
}

// The nearest ancestor of `p` that the sandbox uid cannot traverse, if any.
std::optional<fs::path> BlockedAncestor(const fs::path& p) {
  fs::path cur;
  for (const auto& part : p.parent_path()) {
    cur /= part;
    struct stat st {};
    if (::stat(cur.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) return cur;
  }
  return std::nullopt;
}

// Sandbox views: every scratch and cache directory hidden; the interpreter,
// torch and the harness readable (bound back in where an ancestor is private).
void AddReadable(const fs::path& p, std::vector<fs::path>* hidden, std::vector<sandbox::Bind>* binds) {
  if (auto blocked = BlockedAncestor(p)) {
    hidden->push_back(*blocked);
    binds->push_back({p, false});
  }
}

// Drops hidden paths inside other hidden paths and read-only binds inside
// other binds; orders binds parents first.
void Normalize(std::vector<fs::path>* hidden, std::vector<sandbox::Bind>* binds) {
  std::sort(hidden->begin(), hidden->end());
  hidden->erase(std::unique(hidden->begin(), hidden->end()), hidden->end());
  std::vector<fs::path> h;
  for (const auto& p : *hidden)
    if (h.empty() || !IsUnder(p, h.back())) h.push_back(p);
  *hidden = h;
  std::sort(binds->begin(), binds->end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  std::vector<sandbox::Bind> b;
  for (const auto& x : *binds) {
    bool covered = false;
    for (const auto& y : b) covered |= IsUnder(x.path, y.path) && !x.writable && !y.writable;
    if (!covered) b.push_back(x);
  }
  *binds = b;
}

}  // namespace

StatusOr<std::unique_ptr<HarnessProcess>> Evaluation::StartHarness(const std::string& name, const std::string& mode,
                                                                   json spec, std::vector<sandbox::Bind> binds,
                                                                   bool gpu) {
  const auto& cfg = judge_.config_;
  fs::path proc_dir = name == "reference" ? ref_dir_ : name == "lint" ? eval_dir_ / "lint" : cand_dir_;
  if (name == "pch") proc_dir = judge_.cache_dir_ / "pch";
  fs::path spec_path = proc_dir / ("spec_" + name + ".json");
  CA_RETURN_IF_ERROR(WriteFileAtomic(spec_path, spec.dump(2)));
  fs::path tmp = proc_dir / "tmp";
  CA_RETURN_IF_ERROR(MakeDirs(tmp));
  if (judge_.sandbox_->isolation().drop_uid) {
    ::chown(spec_path.c_str(), static_cast<uid_t>(judge_.sandbox_->config().uid),
            static_cast<gid_t>(judge_.sandbox_->config().gid));
    ::chown(tmp.c_str(), static_cast<uid_t>(judge_.sandbox_->config().uid),
            static_cast<gid_t>(judge_.sandbox_->config().gid));
  }

  sandbox::SpawnSpec s;
  s.argv = {judge_.python_.executable, "-m", "cuda_agent_harness", mode, spec_path.string()};
  std::string path = fs::path(judge_.python_.executable).parent_path().string() + ":/usr/local/cuda/bin:/usr/bin:/bin";
  s.env = {"PATH=" + path,
           "PYTHONPATH=" + judge_.harness_dir_.string(),
           "PYTHONDONTWRITEBYTECODE=1",
           "PYTHONUNBUFFERED=1",
           "PYTHONNOUSERSITE=1",
           "HOME=" + tmp.string(),
           "TMPDIR=" + tmp.string(),
           "XDG_CACHE_HOME=" + tmp.string(),
           "TORCH_EXTENSIONS_DIR=" + tmp.string(),
           "CUDA_HOME=/usr/local/cuda",
           "LC_ALL=C",
           "OMP_NUM_THREADS=" + std::to_string(cfg.cpu_threads),
           "MKL_NUM_THREADS=" + std::to_string(cfg.cpu_threads),
           "CUDA_VISIBLE_DEVICES=" + (gpu ? std::to_string(cfg.device) : std::string())};
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) s.env.push_back(std::string("LD_LIBRARY_PATH=") + ld);
  if (judge_.backend_ == "cpu") {
    // Freed large blocks stay in the heap: no page faults that depend on the
    // process's history in timed calls (DESIGN.md §5).
    s.env.push_back("MALLOC_MMAP_MAX_=0");
    s.env.push_back("MALLOC_TRIM_THRESHOLD_=68719476736");
  }
  if (name == "reference") {
    s.env.push_back("TORCHINDUCTOR_CACHE_DIR=" + (judge_.cache_dir_ / "inductor").string());
    s.env.push_back("TRITON_CACHE_DIR=" + (judge_.cache_dir_ / "triton").string());
  }
  s.cwd = proc_dir;
  s.hidden = {judge_.work_root_, judge_.cache_dir_};
  for (const auto& p : judge_.python_.readable) AddReadable(p, &s.hidden, &s.binds);
  AddReadable(judge_.harness_dir_, &s.hidden, &s.binds);
  for (auto& b : binds) s.binds.push_back(std::move(b));
  s.binds.push_back({proc_dir, true});
  // A bind under a directory the sandbox uid cannot traverse (a cache in
  // /root, say) is reached through an empty tmpfs over that directory.
  for (const auto& b : s.binds)
    if (auto blocked = BlockedAncestor(b.path)) s.hidden.push_back(*blocked);
  Normalize(&s.hidden, &s.binds);
  s.stdout_path = logs_dir_.empty() ? proc_dir / (name + ".out") : logs_dir_ / (name + ".out");
  s.stderr_path = logs_dir_.empty() ? proc_dir / (name + ".err") : logs_dir_ / (name + ".err");
  if (gpu && judge_.backend_ == "cuda") s.gpu = static_cast<int>(cfg.device);
  return HarnessProcess::Start(*judge_.sandbox_, s);
}

StatusOr<json> Evaluation::Ask(HarnessProcess& process, const json& command, const std::string& event,
                               Clock::time_point deadline) {
  if (!command.is_null()) CA_RETURN_IF_ERROR(process.Send(command));
  CA_ASSIGN_OR_RETURN(json msg, Receive(process, deadline));
  std::string got = msg.value("event", "");
  if (got == event || got == "error") return msg;
  // Anything else is out of protocol: a forged or stray message.
  return Internal("unexpected harness message '" + got + "' while waiting for '" + event + "'");
}

std::string Evaluation::BuildCacheKey() const {
  const auto& cfg = judge_.config_;
  Hasher h;
  h.Add(candidate_.hash).Add(judge_.backend_).Add(cfg.cuda_arch).Add(judge_.python_.torch_version);
  for (const auto* flags : {&cfg.cxx_flags, &cfg.nvcc_flags, &cfg.link_libraries})
    for (const auto& f : *flags) h.Add(f);
  // The harness's build code decides how sources become a module.
  auto build_py = ReadFile(judge_.harness_dir_ / "cuda_agent_harness" / "build.py");
  h.Add(build_py.ok() ? *build_py : "");
  return h.HexDigest().substr(0, 32);
}

bool Evaluation::RestoreCachedBuild(const std::string& key) {
  fs::path cached = judge_.cache_dir_ / "builds" / key;
  if (!fs::exists(cached / "DONE")) return false;
  std::error_code ec;
  fs::remove_all(cand_dir_ / "build", ec);
  if (!CopyTree(cached / "build", cand_dir_ / "build").ok()) return false;
  if (judge_.sandbox_->isolation().drop_uid)
    (void)ChownTree(cand_dir_ / "build", static_cast<uid_t>(judge_.sandbox_->config().uid),
                    static_cast<gid_t>(judge_.sandbox_->config().gid));
  return true;
}

void Evaluation::StoreCachedBuild(const std::string& key) {
  fs::path root = judge_.cache_dir_ / "builds";
  fs::path tmp = root / (key + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rng_() % 100000));
  std::error_code ec;
  if (!CopyTree(cand_dir_ / "build", tmp / "build").ok() || !WriteFileAtomic(tmp / "DONE", "ok\n").ok()) {
    fs::remove_all(tmp, ec);
    return;
  }
  fs::rename(tmp, root / key, ec);
  if (ec) fs::remove_all(tmp, ec);  // another evaluation stored it first
}

StatusOr<json> Evaluation::Receive(HarnessProcess& process, Clock::time_point deadline) {
  if (!cancelled_) return process.Receive(deadline);
  while (true) {
    if (cancelled_()) {
      process.Kill();
      was_cancelled_ = true;
      return Status(StatusCode::kCancelled, "cancelled");
    }
    auto slice = std::min(deadline, Clock::now() + std::chrono::milliseconds(250));
    auto msg = process.Receive(slice);
    if (msg.ok() || msg.status().code() != StatusCode::kDeadlineExceeded || slice == deadline) return msg;
  }
}

Status Evaluation::BuildPch(Judge& judge) {
  fs::path root = judge.cache_dir_ / "pch";
  CA_RETURN_IF_ERROR(MakeDirs(root));
  uid_t uid = static_cast<uid_t>(judge.sandbox_->config().uid);
  gid_t gid = static_cast<gid_t>(judge.sandbox_->config().gid);
  if (judge.sandbox_->isolation().drop_uid) CA_RETURN_IF_ERROR(ChownTree(root, uid, gid));
  Task none;
  Candidate nobody;
  Evaluation e(judge, none, nobody, Stage::kCompile, nullptr);
  json spec = e.CommonSpec();
  auto start = Clock::now();
  CA_ASSIGN_OR_RETURN(auto proc, e.StartHarness("pch", "pch", spec, {}, false));
  auto msg = e.Ask(*proc, json(), "pch", After(judge.config_.compile_timeout_s * 4));
  auto exit = proc->Finish(After(10));
  if (!msg.ok() || !msg->value("ok", false)) {
    std::string log = msg.ok() ? msg->value("log", "") : proc->LogTail(4000);
    if (!msg.ok()) log = msg.status().message() + "; " + (exit.ok() ? exit->Describe() : "") + "\n" + log;
    return Internal("building the precompiled torch header failed: " + log.substr(0, 4000));
  }
  CA_LOG(kInfo) << "precompiled torch header ready in " << Seconds(start) << " s";
  return Status::Ok();
}

StatusOr<DeviceProbe> Evaluation::ProbeDevice(Judge& judge) {
  Task none;
  Candidate nobody;
  Evaluation e(judge, none, nobody, Stage::kCompile, nullptr);
  CA_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create(judge.work_root_, "probe-"));
  e.cand_dir_ = dir.path();  // the probe's working directory
  if (judge.sandbox_->isolation().drop_uid)
    CA_RETURN_IF_ERROR(ChownTree(dir.path(), static_cast<uid_t>(judge.sandbox_->config().uid),
                                 static_cast<gid_t>(judge.sandbox_->config().gid)));
  CA_ASSIGN_OR_RETURN(auto proc, e.StartHarness("probe", "probe", e.CommonSpec(), {}, true));
  auto msg = e.Ask(*proc, json(), "probe", After(120));
  auto exit = proc->Finish(After(10));
  DeviceProbe probe;
  if (!msg.ok()) {
    probe.message = "the probe process failed: " + msg.status().message() + "; " +
                    (exit.ok() ? exit->Describe() : "") + "\n" + proc->LogTail(2000);
    return probe;
  }
  probe.ok = msg->value("ok", false);
  probe.message = msg->value("message", "");
  probe.free_mb = msg->value("free_mb", int64_t{0});
  probe.total_mb = msg->value("total_mb", int64_t{0});
  return probe;
}

}  // namespace cuda_agent::kernel_eval
