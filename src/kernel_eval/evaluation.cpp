#include "evaluation.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "cuda_agent/kernel_eval/reward.h"
#include "cuda_agent/kernel_eval/tensor_compare.h"
#include "cuda_agent/kernel_eval/timing_checks.h"
#include "cuda_agent/util/hash.h"
#include "cuda_agent/util/log.h"

namespace cuda_agent::kernel_eval {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string JoinViolations(const json& violations, std::vector<std::string>* cheats) {
  for (const auto& v : violations)
    cheats->push_back(v.value("file", "") + ":" + std::to_string(v.value("line", 0)) + ": " + v.value("message", ""));
  return cheats->empty() ? "" : cheats->front();
}

}  // namespace

Evaluation::Evaluation(Judge& judge, const Task& task, const Candidate& candidate, Stage stop_after,
                       std::function<bool()> cancelled)
    : judge_(judge),
      task_(task),
      candidate_(candidate),
      stop_after_(stop_after),
      cancelled_(std::move(cancelled)),
      rng_(std::random_device{}()) {}

Evaluation::~Evaluation() {
  if (reference_) reference_->Kill();
  if (candidate_process_) candidate_process_->Kill();
}

bool Evaluation::Decide(Outcome outcome, std::string message) {
  verdict_.outcome = outcome;
  verdict_.message = std::move(message);
  return true;
}

void Evaluation::Mark(const std::string& phase, Clock::time_point since) {
  verdict_.phase_seconds[phase] += Seconds(since);
}

StatusOr<Verdict> Evaluation::Run() {
  auto start = Clock::now();
  CA_RETURN_IF_ERROR(Prepare());
  const auto& cfg = judge_.config_;
  verdict_.environment = {{"backend", judge_.backend_},
                          {"device_name", judge_.python_.device_name},
                          {"torch", judge_.python_.torch_version},
                          {"tf32_baselines", cfg.tf32},
                          {"isolation", judge_.sandbox_->isolation().description},
                          {"static_checks", cfg.static_checks},
                          {"cxx_flags", cfg.cxx_flags},
                          {"nvcc_flags", cfg.nvcc_flags},
                          {"cuda_arch", cfg.cuda_arch},
                          {"seed", seed_},
                          {"num_checks", cfg.num_checks},
                          {"hidden_variants", cfg.hidden_variants},
                          {"atol", cfg.atol},
                          {"rtol", cfg.rtol},
                          {"candidate_format", CandidateKindName(candidate_.kind)},
                          {"task", task_.name}};
  using Phase = StatusOr<bool> (Evaluation::*)();
  std::vector<Phase> phases{&Evaluation::Lint, &Evaluation::Compile};
  if (stop_after_ != Stage::kCompile)  // the reference runs while the candidate compiles
    phases = {&Evaluation::Lint, &Evaluation::StartReference, &Evaluation::Compile, &Evaluation::AwaitReference,
              &Evaluation::Verify};
  if (stop_after_ == Stage::kProfile) phases.push_back(&Evaluation::Profile);
  verdict_.stage = StageName(stop_after_);
  bool decided = false;
  for (Phase phase : phases) {
    auto result = (this->*phase)();
    if (was_cancelled_) break;
    if (!result.ok()) return result.status();
    if ((decided = *result)) break;
  }
  if (was_cancelled_) return Status(StatusCode::kCancelled, "evaluation cancelled by the caller");
  if (!decided)
    Decide(Outcome::kOk, stop_after_ == Stage::kCompile  ? "compiled (not run)"
                         : stop_after_ == Stage::kVerify ? "correct on every check (not timed)"
                                                         : "correct on every check");
  RewardKind kind = RewardKind::kMilestone;
  ParseRewardKind(cfg.reward, &kind);
  // Only a whole evaluation earns a reward; a tool's partial one says how far it got.
  verdict_.reward = stop_after_ == Stage::kProfile ? ComputeReward(verdict_, kind, cfg.speed_margin) : 0;
  verdict_.compile_log = TruncateMiddle(verdict_.compile_log, static_cast<size_t>(cfg.log_bytes));
  verdict_.run_log = TruncateMiddle(verdict_.run_log, static_cast<size_t>(cfg.log_bytes));
  verdict_.phase_seconds["total"] = Seconds(start);
  if (cfg.keep_work_dir) {
    dir_->Keep();
    verdict_.environment["work_dir"] = eval_dir_.string();
  }
  return verdict_;
}

Status Evaluation::Prepare() {
  const auto& cfg = judge_.config_;
  seed_ = cfg.seed != 0 ? cfg.seed : static_cast<int64_t>(rng_() % 1000000000ULL) + 1;
  CA_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create(judge_.work_root_, "eval-"));
  dir_.emplace(std::move(dir));
  eval_dir_ = dir_->path();
  task_copy_ = eval_dir_ / "task" / task_.path.filename();
  cand_dir_ = eval_dir_ / "cand";
  ref_dir_ = eval_dir_ / "ref";
  logs_dir_ = eval_dir_ / "logs";
  for (const auto& d : {eval_dir_ / "task", cand_dir_ / "build", cand_dir_ / "out", cand_dir_ / "tmp", ref_dir_ / "out",
                        ref_dir_ / "tmp", eval_dir_ / "lint" / "tmp", logs_dir_})
    CA_RETURN_IF_ERROR(MakeDirs(d));
  CA_RETURN_IF_ERROR(CopyTree(task_.path, task_copy_));
  if (fs::is_directory(candidate_.root)) {
    CA_RETURN_IF_ERROR(CopyTree(candidate_.root, cand_dir_ / "src"));
  } else {
    CA_RETURN_IF_ERROR(MakeDirs(cand_dir_ / "src"));
    CA_RETURN_IF_ERROR(CopyTree(candidate_.root, cand_dir_ / "src" / candidate_.module_name));
  }
  cand_module_ = cand_dir_ / "src" / candidate_.module_name;
  uid_t uid = static_cast<uid_t>(judge_.sandbox_->config().uid);
  gid_t gid = static_cast<gid_t>(judge_.sandbox_->config().gid);
  if (judge_.sandbox_->isolation().drop_uid) {
    for (const auto& d : {cand_dir_, ref_dir_, eval_dir_ / "lint"}) CA_RETURN_IF_ERROR(ChownTree(d, uid, gid));
    ::chmod(eval_dir_.c_str(), 0711);
  }
  return Status::Ok();
}

json Evaluation::CommonSpec() const {
  const auto& cfg = judge_.config_;
  return {{"backend", judge_.backend_},           {"seed", seed_},
          {"num_checks", cfg.num_checks},         {"hidden_variants", cfg.hidden_variants},
          {"cpu_threads", cfg.cpu_threads},       {"tf32", cfg.tf32},
          {"flush_cache", cfg.flush_cache},       {"flush_bytes", cfg.flush_bytes},
          {"task_path", task_copy_.string()},     {"cxx_flags", cfg.cxx_flags},
          {"nvcc_flags", cfg.nvcc_flags},         {"cuda_arch", cfg.cuda_arch},
          {"link_libraries", cfg.link_libraries}, {"pch_root", (judge_.cache_dir_ / "pch").string()}};
}

json Evaluation::CandidateSpec() const {
  json spec = CommonSpec();
  spec["candidate_kind"] = CandidateKindName(candidate_.kind);
  spec["candidate_dir"] = (cand_dir_ / "src").string();
  spec["candidate_module"] = cand_module_.string();
  spec["build_dir"] = (cand_dir_ / "build").string();
  spec["out_dir"] = (cand_dir_ / "out").string();
  return spec;
}

bool Evaluation::DecideFromExit(HarnessProcess& process, const Status& why, bool compiling) {
  if (why.code() == StatusCode::kCancelled) return true;  // Run() turns this into an error
  if (why.code() == StatusCode::kDeadlineExceeded) process.Kill();
  auto exit = process.Finish(After(10));
  verdict_.run_log = process.LogTail(static_cast<size_t>(judge_.config_.log_bytes));
  if (why.code() == StatusCode::kDeadlineExceeded || (exit.ok() && exit->timed_out)) {
    return compiling ? Decide(Outcome::kCompileTimeout, "the build ran past compile_timeout_s")
                     : Decide(Outcome::kTimeout, "the candidate ran past run_timeout_s");
  }
  std::string how = exit.ok() ? exit->Describe() : exit.status().message();
  if (why.code() == StatusCode::kInternal) how = why.message();
  return compiling ? Decide(Outcome::kCompileError, "the build process ended abnormally: " + how)
                   : Decide(Outcome::kRuntimeError, "the candidate's process ended abnormally: " + how);
}

StatusOr<bool> Evaluation::Lint() {
  if (!judge_.config_.static_checks) {
    verdict_.warnings.push_back("static checks disabled (judge.static_checks=false)");
    return false;
  }
  auto start = Clock::now();
  json spec = CandidateSpec();
  CA_ASSIGN_OR_RETURN(auto proc, StartHarness("lint", "lint", spec, {{cand_dir_ / "src", false}}, false));
  auto msg = Ask(*proc, json(), "lint", After(120));
  Mark("lint", start);
  if (!msg.ok()) return DecideFromExit(*proc, msg.status(), true);
  (void)proc->Finish(After(10));
  if ((*msg).value("syntax_error", false)) {
    verdict_.compile_log = (*msg)["violations"][0].value("message", "");
    return Decide(Outcome::kCompileError, "model_new.py: " + verdict_.compile_log);
  }
  if (!(*msg)["violations"].empty()) {
    std::string first = JoinViolations((*msg)["violations"], &verdict_.cheats);
    return Decide(Outcome::kForbidden, "static check: " + first);
  }
  return false;
}

StatusOr<bool> Evaluation::StartReference() {
  json ref_spec = CommonSpec();
  ref_spec["out_dir"] = (ref_dir_ / "out").string();
  fs::path inductor = judge_.cache_dir_ / "inductor", triton = judge_.cache_dir_ / "triton";
  for (const auto& d : {inductor, triton}) {
    CA_RETURN_IF_ERROR(MakeDirs(d));
    if (judge_.sandbox_->isolation().drop_uid)
      ::chown(d.c_str(), static_cast<uid_t>(judge_.sandbox_->config().uid),
              static_cast<gid_t>(judge_.sandbox_->config().gid));
  }
  reference_start_ = Clock::now();
  CA_ASSIGN_OR_RETURN(reference_, StartHarness("reference", "reference", ref_spec,
                                               {{eval_dir_ / "task", false}, {inductor, true}, {triton, true}}, true));
  return false;
}

StatusOr<bool> Evaluation::Compile() {
  const auto& cfg = judge_.config_;
  // The candidate build runs while the reference computes its outputs; a build
  // of the same sources with the same toolchain and flags is reused.
  auto compile_start = Clock::now();
  std::string build_key = BuildCacheKey();
  bool cached = RestoreCachedBuild(build_key);
  ++(cached ? judge_.build_hits_ : judge_.build_misses_);
  verdict_.environment["compile_cached"] = cached;
  if (cached) {
    verdict_.compile_log = "(reused the cached build " + build_key + ")";
    Mark("compile", compile_start);
  } else {
    CA_RETURN_IF_ERROR(judge_.EnsurePch());
    compile_start = Clock::now();
    CA_ASSIGN_OR_RETURN(auto compiler, StartHarness("compile", "compile", CandidateSpec(),
                                                    {{judge_.cache_dir_ / "pch", false}}, false));
    auto built = Ask(*compiler, json(), "compiled", After(cfg.compile_timeout_s));
    Mark("compile", compile_start);
    if (!built.ok()) return DecideFromExit(*compiler, built.status(), true);
    (void)compiler->Finish(After(10));
    verdict_.compile_log = built->value("log", "");
    for (const auto& c : (*built)["commands"]) verdict_.compile_commands.push_back(c);
    if (!built->value("ok", false))
      return Decide(Outcome::kCompileError, built->value("stage", "") == "import"
                                                ? "model_new.py failed to import"
                                                : "the candidate's sources failed to compile");
    StoreCachedBuild(build_key);
  }

  return false;
}

StatusOr<bool> Evaluation::AwaitReference() {
  auto ready = Ask(*reference_, json(), "ready", After(judge_.config_.run_timeout_s));
  Mark("reference", reference_start_);
  if (!ready.ok()) {
    auto exit = reference_->Finish(After(10));
    return Internal("the reference process failed (" + ready.status().message() + "; " +
                    (exit.ok() ? exit->Describe() : "") + "):\n" + reference_->LogTail(4000));
  }
  if (ready->value("event", "") == "error")
    return InvalidArgument("task " + task_.path.string() + ": " + ready->value("message", ""));
  ref_ready_ = *ready;
  verdict_.environment["torch"] = (*ready)["env"].value("torch", "");
  verdict_.environment["cuda"] = (*ready)["env"].value("cuda", "");
  verdict_.environment["device_name"] = (*ready)["env"].value("device_name", "");
  if (ready->value("degenerate", false))
    verdict_.warnings.push_back("the reference output does not depend on the inputs (degenerate task)");
  return false;
}

StatusOr<bool> Evaluation::CompareCheck(const std::string& tag, const json& ref_outputs, size_t cand_outputs,
                                        const std::string& cand_prefix, bool samples) {
  const auto& cfg = judge_.config_;
  CheckResult check;
  check.tag = tag;
  check.passed = true;
  if (cand_outputs != ref_outputs.size()) {
    check.passed = false;
    check.message =
        "returned " + std::to_string(cand_outputs) + " outputs, expected " + std::to_string(ref_outputs.size());
  }
  CompareOptions opts;
  opts.atol = cfg.atol;
  opts.rtol = cfg.rtol;
  opts.nan_policy = cfg.nan_policy == "forbid" ? NanPolicy::kForbid : NanPolicy::kMatch;
  opts.check_dtype = !samples;
  for (size_t j = 0; check.passed && j < ref_outputs.size(); ++j) {
    fs::path ref_file = ref_dir_ / "out" / ((samples ? "samples_eager." : tag + ".") + std::to_string(j) + ".t");
    fs::path cand_file = cand_dir_ / "out" / ((samples ? cand_prefix : tag + ".") + std::to_string(j) + ".t");
    std::error_code ec;
    auto ref_size = fs::file_size(ref_file, ec);
    if (ec) return Internal("missing reference output " + ref_file.string());
    auto cand_size = fs::file_size(cand_file, ec);
    if (ec || cand_size > ref_size + 4096) {
      check.passed = false;
      check.message = "output " + std::to_string(j) + (ec ? " is missing" : " has the wrong size");
      break;
    }
    CA_ASSIGN_OR_RETURN(HostTensor ref, ReadTensorFile(ref_file));
    auto cand = ReadTensorFile(cand_file);
    if (!cand.ok()) {
      check.passed = false;
      check.message = "output " + std::to_string(j) + " is unreadable";
      break;
    }
    CompareResult r = CompareTensors(ref, *cand, opts);
    check.max_abs_error = std::max(check.max_abs_error, r.max_abs_error);
    check.max_rel_error = std::max(check.max_rel_error, r.max_rel_error);
    if (!r.passed) {
      check.passed = false;
      check.message = "output " + std::to_string(j) + ": " + r.message;
    }
  }
  verdict_.checks.push_back(check);
  return check.passed;
}

StatusOr<bool> Evaluation::Verify() {
  const auto& cfg = judge_.config_;
  auto start = Clock::now();
  json spec = CandidateSpec();
  spec["reference_checks"] = ref_ready_["checks"];
  spec["reference_mutates_inputs"] = ref_ready_.value("mutates_inputs", false);
  spec["allowed_torch_ops"] = cfg.allowed_torch_ops;
  CA_ASSIGN_OR_RETURN(candidate_process_,
                      StartHarness("candidate", "candidate", spec,
                                   {{eval_dir_ / "task", false}, {judge_.cache_dir_ / "pch", false}}, true));
  auto deadline = After(cfg.run_timeout_s);
  std::map<std::string, json> ref_checks;
  for (const auto& c : ref_ready_["checks"]) ref_checks[c["tag"]] = c["outputs"];
  while (true) {
    auto msg = Receive(*candidate_process_, deadline);
    if (!msg.ok()) {
      Mark("verify", start);
      return DecideFromExit(*candidate_process_, msg.status(), false);
    }
    std::string event = msg->value("event", "");
    if (event == "error") {
      Mark("verify", start);
      std::string kind = msg->value("kind", ""), text = msg->value("message", "");
      verdict_.run_log = text;
      if (kind == "compile") {
        verdict_.compile_log = text;
        return Decide(Outcome::kCompileError, "the candidate's extension failed to build at load time");
      }
      if (kind == "state_dict") return Decide(Outcome::kIncorrect, text);
      std::string last = text.substr(text.find_last_of('\n', text.size() - 2) + 1);
      return Decide(Outcome::kRuntimeError, "the candidate raised: " + last);
    }
    if (event == "check") {
      std::string tag = msg->value("tag", "");
      if (!(*msg)["forbidden_ops"].empty()) {
        for (const auto& op : (*msg)["forbidden_ops"])
          verdict_.cheats.push_back("dispatched PyTorch op " + op.get<std::string>());
        return Decide(Outcome::kForbidden, "ModelNew.forward ran PyTorch compute: " + verdict_.cheats.front());
      }
      if (!(*msg)["problems"].empty())
        return Decide(Outcome::kIncorrect, "check " + tag + ": " + (*msg)["problems"][0].get<std::string>());
      if (!ref_checks.count(tag)) return Decide(Outcome::kRuntimeError, "unexpected check '" + tag + "'");
      CA_ASSIGN_OR_RETURN(bool ok, CompareCheck(tag, ref_checks[tag], (*msg)["outputs"].size(), "", false));
      if (!ok) return Decide(Outcome::kIncorrect, "check " + tag + ": " + verdict_.checks.back().message);
      ref_checks.erase(tag);
      continue;
    }
    if (event == "verified") {
      Mark("verify", start);
      if (!ref_checks.empty()) return Decide(Outcome::kRuntimeError, "the candidate skipped checks");
      for (const auto& t : (*msg)["tampered"]) verdict_.cheats.push_back("replaced " + t.get<std::string>());
      if (!verdict_.cheats.empty()) return Decide(Outcome::kForbidden, "tampering: " + verdict_.cheats.front());
      return false;
    }
    return Decide(Outcome::kRuntimeError, "out-of-protocol message '" + event + "' from the candidate's process");
  }
}

}  // namespace cuda_agent::kernel_eval
