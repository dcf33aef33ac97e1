#include "convert.h"

#include <algorithm>

#include "cuda_agent/util/file.h"

namespace cuda_agent::rpc {
namespace fs = std::filesystem;
using kernel_eval::Outcome;

namespace {

void ToProto(const kernel_eval::TimingStats& s, v1::TimingStats* out) {
  out->set_median_ms(s.median_ms);
  out->set_min_ms(s.min_ms);
  out->set_max_ms(s.max_ms);
  out->set_mean_ms(s.mean_ms);
  out->set_stddev_ms(s.stddev_ms);
  out->set_trials(s.trials);
  out->set_wall_ms(s.wall_ms);
  out->set_cached(s.cached);
}

kernel_eval::TimingStats FromProto(const v1::TimingStats& s) {
  kernel_eval::TimingStats t;
  t.median_ms = s.median_ms();
  t.min_ms = s.min_ms();
  t.max_ms = s.max_ms();
  t.mean_ms = s.mean_ms();
  t.stddev_ms = s.stddev_ms();
  t.trials = s.trials();
  t.wall_ms = s.wall_ms();
  t.cached = s.cached();
  return t;
}

// Proto enum values are the C++ enum's plus one (0 is "unspecified").
v1::Verdict::Outcome ToProto(Outcome o) { return static_cast<v1::Verdict::Outcome>(static_cast<int>(o) + 1); }
Outcome FromProto(v1::Verdict::Outcome o) { return static_cast<Outcome>(static_cast<int>(o) - 1); }

// A relative path of plain components: no "..", ".", empty parts or leading "/".
bool SafeRelativePath(const std::string& path) {
  if (path.empty() || path.size() > 256 || path.front() == '/' || path.find('\0') != std::string::npos) return false;
  for (const auto& part : fs::path(path)) {
    std::string p = part.string();
    if (p.empty() || p == "." || p == ".." || p == "/") return false;
  }
  return true;
}

}  // namespace

void ToProto(const kernel_eval::Verdict& v, v1::Verdict* out) {
  out->set_outcome(ToProto(v.outcome));
  out->set_stage(v.stage);
  out->set_message(v.message);
  out->set_reward(v.reward);
  out->set_compile_log(v.compile_log);
  for (const auto& c : v.compile_commands) out->add_compile_commands(c);
  out->set_run_log(v.run_log);
  for (const auto& c : v.checks) {
    auto* pc = out->add_checks();
    pc->set_tag(c.tag);
    pc->set_passed(c.passed);
    pc->set_max_abs_error(c.max_abs_error);
    pc->set_max_rel_error(c.max_rel_error);
    pc->set_message(c.message);
  }
  out->set_timed(v.timed);
  ToProto(v.eager, out->mutable_eager());
  ToProto(v.compiled, out->mutable_torch_compile());
  ToProto(v.candidate, out->mutable_candidate());
  out->set_speedup_vs_eager(v.speedup_vs_eager);
  out->set_speedup_vs_compile(v.speedup_vs_compile);
  for (const auto& c : v.cheats) out->add_cheats(c);
  for (const auto& w : v.warnings) out->add_warnings(w);
  for (const auto& [k, s] : v.phase_seconds) (*out->mutable_phase_seconds())[k] = s;
  out->set_environment_json(v.environment.dump());
}

kernel_eval::Verdict FromProto(const v1::Verdict& p) {
  kernel_eval::Verdict v;
  v.outcome = FromProto(p.outcome());
  v.stage = p.stage();
  v.message = p.message();
  v.reward = p.reward();
  v.compile_log = p.compile_log();
  v.compile_commands.assign(p.compile_commands().begin(), p.compile_commands().end());
  v.run_log = p.run_log();
  for (const auto& c : p.checks())
    v.checks.push_back({c.tag(), c.passed(), c.max_abs_error(), c.max_rel_error(), c.message()});
  v.timed = p.timed();
  v.eager = FromProto(p.eager());
  v.compiled = FromProto(p.torch_compile());
  v.candidate = FromProto(p.candidate());
  v.speedup_vs_eager = p.speedup_vs_eager();
  v.speedup_vs_compile = p.speedup_vs_compile();
  v.cheats.assign(p.cheats().begin(), p.cheats().end());
  v.warnings.assign(p.warnings().begin(), p.warnings().end());
  for (const auto& [k, s] : p.phase_seconds()) v.phase_seconds[k] = s;
  v.environment = nlohmann::json::parse(p.environment_json(), nullptr, false);
  if (v.environment.is_discarded()) v.environment = nullptr;
  return v;
}

Status ToProto(const kernel_eval::Task& task, const kernel_eval::Candidate& candidate, v1::EvaluateRequest* out) {
  out->mutable_task()->set_name(task.name);
  out->mutable_task()->set_source(task.source);
  auto* c = out->mutable_candidate();
  c->set_format(candidate.kind == kernel_eval::CandidateKind::kWorkspace ? v1::Candidate::WORKSPACE
                                                                         : v1::Candidate::KERNELBENCH);
  if (fs::is_regular_file(candidate.root)) {
    CA_ASSIGN_OR_RETURN(std::string text, ReadFile(candidate.root));
    auto* f = c->add_files();
    f->set_path("model_new.py");
    f->set_content(text);
    return Status::Ok();
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(candidate.root))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    CA_ASSIGN_OR_RETURN(std::string text, ReadFile(p));
    auto* f = c->add_files();
    f->set_path(p.lexically_relative(candidate.root).string());
    f->set_content(text);
  }
  return Status::Ok();
}

StatusOr<Materialized> Materialize(const v1::EvaluateRequest& request, const fs::path& dir) {
  if (request.task().source().empty()) return InvalidArgument("request has no task source");
  if (request.candidate().files_size() == 0) return InvalidArgument("request has no candidate files");
  if (request.candidate().files_size() > 256) return InvalidArgument("candidate has more than 256 files");
  std::string task_name = request.task().name().empty() ? "task" : request.task().name();
  if (!SafeRelativePath(task_name) || task_name.find('/') != std::string::npos)
    return InvalidArgument("task name '" + task_name + "' is not a plain file name");
  fs::path task_path = dir / (task_name + ".py");
  CA_RETURN_IF_ERROR(MakeDirs(dir / "candidate"));
  CA_RETURN_IF_ERROR(WriteFileAtomic(task_path, request.task().source()));
  for (const auto& f : request.candidate().files()) {
    if (!SafeRelativePath(f.path()))
      return InvalidArgument("candidate file path '" + f.path() + "' is not a safe relative path");
    fs::path target = dir / "candidate" / f.path();
    CA_RETURN_IF_ERROR(MakeDirs(target.parent_path()));
    CA_RETURN_IF_ERROR(WriteFileAtomic(target, f.content()));
  }
  Materialized m;
  CA_ASSIGN_OR_RETURN(m.task, kernel_eval::LoadTask(task_path));
  fs::path root = dir / "candidate";
  if (request.candidate().format() == v1::Candidate::KERNELBENCH && request.candidate().files_size() == 1)
    root = root / request.candidate().files(0).path();
  CA_ASSIGN_OR_RETURN(m.candidate, kernel_eval::LoadCandidate(root));
  return m;
}

}  // namespace cuda_agent::rpc
