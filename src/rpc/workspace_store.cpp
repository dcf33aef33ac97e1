#include "workspace_store.h"

#include <algorithm>
#include <random>

#include "cuda_agent/util/hash.h"
#include "cuda_agent/util/log.h"

namespace cuda_agent::rpc {
namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

namespace {

constexpr const char* kReference = "model.py";
constexpr const char* kFixedFiles[] = {"binding_registry.h", "ext_main.cpp"};

bool HasSourceExtension(const std::string& name) {
  for (const char* ext : {".cu", ".cuh", ".cpp", ".h", ".hpp"})
    if (name.size() > std::string(ext).size() && name.ends_with(ext)) return true;
  return false;
}

bool PlainName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; });
}

}  // namespace

FileResult ApplyEdit(std::string* text, const std::string& old_text, const std::string& new_text, bool replace_all) {
  if (old_text.empty()) return FileResult::Refused("old_text is empty; use a write to replace the whole file");
  size_t count = 0;
  for (size_t at = text->find(old_text); at != std::string::npos; at = text->find(old_text, at + old_text.size()))
    ++count;
  if (count == 0) return FileResult::Refused("old_text does not occur in the file");
  if (count > 1 && !replace_all)
    return FileResult::Refused("old_text occurs " + std::to_string(count) +
                               " times; give more context to make it unique, or set replace_all");
  std::string out;
  size_t from = 0;
  for (size_t at = text->find(old_text); at != std::string::npos; at = text->find(old_text, from)) {
    out.append(*text, from, at - from).append(new_text);
    from = at + old_text.size();
  }
  out.append(*text, from, std::string::npos);
  *text = std::move(out);
  return {true, "replaced " + std::to_string(count) + " occurrence" + (count > 1 ? "s" : ""), {}, {}};
}

std::string CandidatePathProblem(const std::string& path) {
  if (path == "model_new.py") return "";
  if (path.rfind("kernels/", 0) == 0) {
    std::string name = path.substr(8);
    if (!PlainName(name)) return "'" + path + "': kernel files are kernels/<name> with letters, digits, _ - and .";
    if (!HasSourceExtension(name)) return "'" + path + "': kernel files end in .cu, .cuh, .cpp, .h or .hpp";
    return "";
  }
  if (path == kReference || path.rfind("build/", 0) == 0) return "'" + path + "' is read-only";
  return "'" + path + "' is not part of the candidate: write model_new.py or kernels/<name>.{cu,cuh,cpp,h,hpp}";
}

WorkspaceStore::WorkspaceStore(fs::path root, fs::path fixed_dir, const config::WorkerConfig& limits)
    : root_(std::move(root)), fixed_dir_(std::move(fixed_dir)), limits_(limits) {
  reaper_ = std::thread([this] {
    auto period = std::chrono::milliseconds(
        static_cast<int64_t>(std::clamp(limits_.workspace_idle_s / 4, 0.05, 30.0) * 1000));
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_cv_.wait_for(lock, period, [this] { return stopping_; })) {
      lock.unlock();
      if (size_t n = Reap()) {
        CA_LOG(kInfo) << "reaped " << n << " idle workspace(s)";
      }
      lock.lock();
    }
  });
}

WorkspaceStore::~WorkspaceStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  reaper_.join();
  std::error_code ec;
  for (auto& [id, ws] : workspaces_) fs::remove_all(ws->dir, ec);
}

StatusOr<std::string> WorkspaceStore::Create(const std::string& task_name, const std::string& task_source,
                                             const std::map<std::string, std::string>& files) {
  std::string name = task_name.empty() ? "task" : task_name;
  if (!PlainName(name) || name.find('.') != std::string::npos)
    return InvalidArgument("task name '" + name + "' is not a plain name");
  if (task_source.empty()) return InvalidArgument("the task has no source");
  std::string id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int64_t>(workspaces_.size()) >= limits_.max_workspaces)
      return ResourceExhausted("worker holds worker.max_workspaces=" + std::to_string(limits_.max_workspaces) +
                               " workspaces; close some");
    std::random_device rd;
    id = "ws-" + Sha256Hex(std::to_string(rd()) + std::to_string(rd()) + std::to_string(++next_id_)).substr(0, 24);
  }
  auto ws = std::make_shared<Workspace>();
  ws->dir = root_ / id;
  ws->task_name = name;
  ws->created = ws->used = SteadyClock::now();
  CA_RETURN_IF_ERROR(MakeDirs(ws->dir / "task"));
  CA_RETURN_IF_ERROR(MakeDirs(ws->dir / "cand"));
  CA_RETURN_IF_ERROR(WriteFileAtomic(ws->dir / "task" / (name + ".py"), task_source));
  for (const auto& [path, content] : files) {
    FileResult r = CheckedWrite(*ws, path, content);
    if (!r.ok) {
      std::error_code ec;
      fs::remove_all(ws->dir, ec);
      return InvalidArgument("initial file " + r.message);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  workspaces_[id] = ws;
  return id;
}

StatusOr<std::shared_ptr<WorkspaceStore::Workspace>> WorkspaceStore::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workspaces_.find(id);
  if (it == workspaces_.end()) return NotFound("no workspace " + id + " on this worker (closed or reaped?)");
  return it->second;
}

int64_t WorkspaceStore::CandidateBytes(const Workspace& ws, const std::string& except, int64_t* files) const {
  int64_t bytes = 0;
  *files = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(ws.dir / "cand", ec); it != fs::recursive_directory_iterator();
       ++it) {
    if (!it->is_regular_file()) continue;
    if (it->path().lexically_relative(ws.dir / "cand").string() == except) continue;
    ++*files;
    bytes += static_cast<int64_t>(it->file_size());
  }
  return bytes;
}

fs::path WorkspaceStore::Resolve(const Workspace& ws, const std::string& path, bool* read_only) const {
  *read_only = true;
  if (path == kReference) return ws.dir / "task" / (ws.task_name + ".py");
  for (const char* fixed : kFixedFiles)
    if (path == std::string("build/") + fixed) return fixed_dir_ / fixed;
  *read_only = false;
  if (!CandidatePathProblem(path).empty()) return {};
  return ws.dir / "cand" / path;
}

FileResult WorkspaceStore::CheckedWrite(Workspace& ws, const std::string& path, const std::string& content) {
  if (ws.submitted) return FileResult::Refused("the workspace was submitted; it no longer changes");
  if (std::string why = CandidatePathProblem(path); !why.empty()) return FileResult::Refused(why);
  int64_t files = 0;
  int64_t bytes = CandidateBytes(ws, path, &files) + static_cast<int64_t>(content.size());
  if (files + 1 > limits_.workspace_max_files)
    return FileResult::Refused("the workspace would hold more than worker.workspace_max_files=" +
                               std::to_string(limits_.workspace_max_files) + " files");
  if (bytes > limits_.workspace_max_kb * 1024)
    return FileResult::Refused("the workspace would hold more than worker.workspace_max_kb=" +
                               std::to_string(limits_.workspace_max_kb) + " KiB");
  fs::path target = ws.dir / "cand" / path;
  if (Status s = MakeDirs(target.parent_path()); !s.ok()) return FileResult::Refused(s.message());
  if (Status s = WriteFileAtomic(target, content); !s.ok()) return FileResult::Refused(s.message());
  return {true, "wrote " + path + " (" + std::to_string(content.size()) + " bytes)", {}, {}};
}

StatusOr<FileResult> WorkspaceStore::Write(const std::string& id, const std::string& path,
                                           const std::string& content) {
  CA_ASSIGN_OR_RETURN(auto ws, Get(id));
  std::lock_guard<std::mutex> lock(ws->mu);
  ws->used = SteadyClock::now();
  return CheckedWrite(*ws, path, content);
}

StatusOr<FileResult> WorkspaceStore::Edit(const std::string& id, const std::string& path, const std::string& old_text,
                                          const std::string& new_text, bool replace_all) {
  CA_ASSIGN_OR_RETURN(auto ws, Get(id));
  std::lock_guard<std::mutex> lock(ws->mu);
  ws->used = SteadyClock::now();
  bool read_only = false;
  fs::path file = Resolve(*ws, path, &read_only);
  if (read_only) return FileResult::Refused("'" + path + "' is read-only");
  if (file.empty() || !fs::is_regular_file(file)) return FileResult::Refused("no file '" + path + "' to edit");
  CA_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  FileResult r = ApplyEdit(&text, old_text, new_text, replace_all);
  if (!r.ok) return r;
  FileResult w = CheckedWrite(*ws, path, text);
  return w.ok ? r : w;
}

StatusOr<FileResult> WorkspaceStore::Read(const std::string& id, const std::string& path) {
  CA_ASSIGN_OR_RETURN(auto ws, Get(id));
  std::lock_guard<std::mutex> lock(ws->mu);
  ws->used = SteadyClock::now();
  bool read_only = false;
  fs::path file = Resolve(*ws, path, &read_only);
  if (file.empty() || !fs::is_regular_file(file)) return FileResult::Refused("no file '" + path + "'");
  CA_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  FileResult r{true, path + " (" + std::to_string(text.size()) + " bytes)", std::move(text), {}};
  return r;
}

StatusOr<FileResult> WorkspaceStore::List(const std::string& id) {
  CA_ASSIGN_OR_RETURN(auto ws, Get(id));
  std::lock_guard<std::mutex> lock(ws->mu);
  ws->used = SteadyClock::now();
  FileResult r;
  std::error_code ec;
  r.files.push_back({kReference, static_cast<int64_t>(fs::file_size(ws->dir / "task" / (ws->task_name + ".py"), ec)),
                     true});
  for (const char* fixed : kFixedFiles)
    r.files.push_back(
        {std::string("build/") + fixed, static_cast<int64_t>(fs::file_size(fixed_dir_ / fixed, ec)), true});
  std::vector<FileEntry> cand;
  for (auto it = fs::recursive_directory_iterator(ws->dir / "cand", ec); it != fs::recursive_directory_iterator();
       ++it)
    if (it->is_regular_file())
      cand.push_back({it->path().lexically_relative(ws->dir / "cand").string(),
                      static_cast<int64_t>(it->file_size()), false});
  std::sort(cand.begin(), cand.end(), [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
  r.files.insert(r.files.end(), cand.begin(), cand.end());
  r.message = std::to_string(r.files.size()) + " files";
  return r;
}

StatusOr<Snapshot> WorkspaceStore::Snap(const std::string& id, bool submit, std::string* refused) {
  CA_ASSIGN_OR_RETURN(auto ws, Get(id));
  std::lock_guard<std::mutex> lock(ws->mu);
  ws->used = SteadyClock::now();
  if (!fs::is_regular_file(ws->dir / "cand" / "model_new.py")) {
    *refused = "there is no model_new.py yet: write it (and kernels/ for the workspace format) first";
    return Snapshot{};
  }
  CA_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create(root_, "snap-"));
  Snapshot snap;
  snap.dir = std::make_unique<TempDir>(std::move(dir));
  CA_RETURN_IF_ERROR(CopyTree(ws->dir / "task", snap.dir->path() / "task"));
  CA_RETURN_IF_ERROR(CopyTree(ws->dir / "cand", snap.dir->path() / "cand"));
  CA_ASSIGN_OR_RETURN(snap.task, kernel_eval::LoadTask(snap.dir->path() / "task" / (ws->task_name + ".py")));
  CA_ASSIGN_OR_RETURN(snap.candidate, kernel_eval::LoadCandidate(snap.dir->path() / "cand"));
  if (submit) ws->submitted = true;
  ++ws->running;
  snap.lease = std::shared_ptr<void>(nullptr, [ws](void*) {
    std::lock_guard<std::mutex> lock(ws->mu);
    --ws->running;
    ws->used = SteadyClock::now();
  });
  return snap;
}

Status WorkspaceStore::Close(const std::string& id) {
  std::shared_ptr<Workspace> ws;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workspaces_.find(id);
    if (it == workspaces_.end()) return NotFound("no workspace " + id + " on this worker");
    ws = it->second;
    workspaces_.erase(it);
  }
  std::lock_guard<std::mutex> lock(ws->mu);  // wait for an operation in progress
  std::error_code ec;
  fs::remove_all(ws->dir, ec);
  return Status::Ok();
}

size_t WorkspaceStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workspaces_.size();
}

size_t WorkspaceStore::Reap() {
  auto now = SteadyClock::now();
  auto seconds = [&](SteadyClock::time_point t) { return std::chrono::duration<double>(now - t).count(); };
  std::vector<std::string> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, ws] : workspaces_) {
      std::unique_lock<std::mutex> busy(ws->mu, std::try_to_lock);
      if (!busy.owns_lock() || ws->running > 0) continue;  // in use right now
      if (seconds(ws->used) > limits_.workspace_idle_s || seconds(ws->created) > limits_.workspace_max_s)
        expired.push_back(id);
    }
  }
  size_t n = 0;
  for (const auto& id : expired) n += Close(id).ok() ? 1 : 0;
  return n;
}

}  // namespace cuda_agent::rpc
