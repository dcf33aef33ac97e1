#include "cuda_agent/rpc/worker_server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "convert.h"
#include "device_health.h"
#include "idempotency_cache.h"
#include "workspace_store.h"
#include "cuda_agent/util/file.h"
#include "cuda_agent/util/log.h"
#include "cuda_agent/v1/worker.grpc.pb.h"

namespace cuda_agent::rpc {
namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

std::string HostOf(const std::string& host_port) {
  if (!host_port.empty() && host_port.front() == '[') return host_port.substr(1, host_port.find(']') - 1);
  size_t colon = host_port.rfind(':');
  return colon == std::string::npos ? host_port : host_port.substr(0, colon);
}

Status ToGrpc(const cuda_agent::Status& s) {
  switch (s.code()) {
    case cuda_agent::StatusCode::kOk:
      return Status::OK;
    case cuda_agent::StatusCode::kInvalidArgument:
      return Status(StatusCode::INVALID_ARGUMENT, s.message());
    case cuda_agent::StatusCode::kNotFound:
      return Status(StatusCode::NOT_FOUND, s.message());
    case cuda_agent::StatusCode::kFailedPrecondition:
      return Status(StatusCode::FAILED_PRECONDITION, s.message());
    case cuda_agent::StatusCode::kDeadlineExceeded:
      return Status(StatusCode::DEADLINE_EXCEEDED, s.message());
    case cuda_agent::StatusCode::kResourceExhausted:
      return Status(StatusCode::RESOURCE_EXHAUSTED, s.message());
    case cuda_agent::StatusCode::kCancelled:
      return Status(StatusCode::CANCELLED, s.message());
    case cuda_agent::StatusCode::kUnavailable:
      return Status(StatusCode::UNAVAILABLE, s.message());
    case cuda_agent::StatusCode::kInternal:
      return Status(StatusCode::INTERNAL, s.message());
  }
  return Status(StatusCode::UNKNOWN, s.message());
}

void FileToProto(const FileResult& r, v1::FileResponse* out) {
  out->set_ok(r.ok);
  out->set_message(r.message);
  out->set_content(r.content);
  for (const auto& f : r.files) {
    auto* e = out->add_files();
    e->set_path(f.path);
    e->set_size(f.size);
    e->set_read_only(f.read_only);
  }
}

std::filesystem::path WorkspaceRoot(const config::WorkerConfig& config) {
  if (!config.workspace_dir.empty()) return config.workspace_dir;
  return std::filesystem::temp_directory_path() / ("cuda-agent-workspaces-" + std::to_string(::geteuid()));
}

// One GPU (or the CPU) with its judge and health.
struct Device {
  std::shared_ptr<kernel_eval::Judge> judge;
  std::unique_ptr<DeviceHealth> health;
  std::atomic<int> running{0};
  std::atomic<int64_t> done{0};
};

class WorkerService final : public v1::Worker::Service {
 public:
  WorkerService(config::WorkerConfig config, std::vector<std::shared_ptr<kernel_eval::Judge>> judges, std::string name)
      : config_(std::move(config)),
        name_(std::move(name)),
        evaluations_(static_cast<size_t>(config_.idempotency_entries)),
        tools_(static_cast<size_t>(config_.idempotency_entries)),
        workspaces_(WorkspaceRoot(config_), judges.front()->harness_dir() / "cuda_agent_harness" / "workspace",
                    config_) {
    for (auto& j : judges) {
      auto d = std::make_unique<Device>();
      d->judge = j;
      d->health = std::make_unique<DeviceHealth>(j, config_);
      devices_.push_back(std::move(d));
    }
  }

  Status Evaluate(ServerContext* ctx, const v1::EvaluateRequest* request, v1::EvaluateResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    const std::string& key = request->idempotency_key();
    if (!key.empty() && evaluations_.BeginOrGet(key, response)) {
      response->set_from_idempotency_cache(true);
      ++idempotent_hits_;
      return Status::OK;
    }
    Status status = [&] {
      auto dir = TempDir::Create(std::filesystem::temp_directory_path() / "cuda-agent-requests", "req-");
      if (!dir.ok()) return Status(StatusCode::INTERNAL, dir.status().message());
      auto m = Materialize(*request, dir->path());
      if (!m.ok()) return Status(StatusCode::INVALID_ARGUMENT, m.status().message());
      kernel_eval::Verdict verdict;
      Status s = Judge(ctx, m->task, m->candidate, kernel_eval::Stage::kProfile, &verdict);
      if (s.ok()) {
        ToProto(verdict, response->mutable_verdict());
        response->set_worker(name_);
      }
      return s;
    }();
    if (!key.empty()) {
      if (status.ok())
        evaluations_.Finish(key, *response);
      else
        evaluations_.Abandon(key);
    }
    return status;
  }

  Status CreateWorkspace(ServerContext* ctx, const v1::CreateWorkspaceRequest* request,
                         v1::CreateWorkspaceResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    if (std::string why = QuarantineReason(); !why.empty())
      return Status(StatusCode::UNAVAILABLE, "device quarantined: " + why);
    std::map<std::string, std::string> files;
    for (const auto& f : request->files()) files[f.path()] = f.content();
    auto id = workspaces_.Create(request->task().name(), request->task().source(), files);
    if (!id.ok()) return ToGrpc(id.status());
    response->set_workspace_id(*id);
    response->set_worker(name_);
    return Status::OK;
  }

  Status WriteFile(ServerContext* ctx, const v1::WriteFileRequest* request, v1::FileResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    return Answer(workspaces_.Write(request->workspace_id(), request->path(), request->content()), response);
  }

  Status EditFile(ServerContext* ctx, const v1::EditFileRequest* request, v1::FileResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    return Answer(workspaces_.Edit(request->workspace_id(), request->path(), request->old_text(),
                                   request->new_text(), request->replace_all()),
                  response);
  }

  Status ReadFile(ServerContext* ctx, const v1::ReadFileRequest* request, v1::FileResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    return Answer(workspaces_.Read(request->workspace_id(), request->path()), response);
  }

  Status ListFiles(ServerContext* ctx, const v1::ListFilesRequest* request, v1::FileResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    return Answer(workspaces_.List(request->workspace_id()), response);
  }

  Status RunTool(ServerContext* ctx, const v1::RunToolRequest* request, v1::ToolResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    kernel_eval::Stage stage;
    switch (request->tool()) {
      case v1::COMPILE:
        stage = kernel_eval::Stage::kCompile;
        break;
      case v1::VERIFY:
        stage = kernel_eval::Stage::kVerify;
        break;
      case v1::PROFILE:
        stage = kernel_eval::Stage::kProfile;
        break;
      default:
        return Status(StatusCode::INVALID_ARGUMENT, "unknown tool");
    }
    return RunOnWorkspace(ctx, request->workspace_id(), request->idempotency_key(), stage, false, response);
  }

  Status Submit(ServerContext* ctx, const v1::SubmitRequest* request, v1::ToolResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    return RunOnWorkspace(ctx, request->workspace_id(), request->idempotency_key(), kernel_eval::Stage::kProfile,
                          true, response);
  }

  Status CloseWorkspace(ServerContext* ctx, const v1::CloseWorkspaceRequest* request,
                        v1::CloseWorkspaceResponse*) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    return ToGrpc(workspaces_.Close(request->workspace_id()));
  }

  Status Health(ServerContext* ctx, const v1::HealthRequest* request, v1::HealthResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    std::string why = QuarantineReason();
    std::lock_guard<std::mutex> lock(mu_);
    response->set_serving(why.empty());
    response->set_quarantine_reason(why);
    response->set_queued(static_cast<int32_t>(queued_));
    response->set_running(static_cast<int32_t>(running_));
    return Status::OK;
  }

  Status Info(ServerContext* ctx, const v1::InfoRequest* request, v1::InfoResponse* response) override {
    if (Status s = Admit(ctx, *request); !s.ok()) return s;
    const kernel_eval::Judge& judge = *devices_.front()->judge;
    response->set_worker(name_);
    response->set_backend(judge.backend());
    response->set_device_name(judge.python().device_name);
    response->set_torch_version(judge.python().torch_version);
    response->set_isolation(judge.sandbox().isolation().description);
    response->set_toolchain(judge.toolchain());
    response->set_max_concurrent(static_cast<int>(config_.max_concurrent));
    response->set_evaluations_done(evaluations_done_);
    response->set_idempotent_hits(idempotent_hits_);
    response->set_workspaces(static_cast<int32_t>(workspaces_.size()));
    kernel_eval::JudgeStats stats;
    for (const auto& d : devices_) {
      kernel_eval::JudgeStats s = d->judge->stats();
      stats.build_cache_hits += s.build_cache_hits;
      stats.build_cache_misses += s.build_cache_misses;
      stats.baseline_cache_hits += s.baseline_cache_hits;
      stats.baseline_cache_misses += s.baseline_cache_misses;
      auto* status = response->add_devices();
      status->set_index(static_cast<int32_t>(d->judge->config().device));
      status->set_name(d->judge->python().device_name);
      status->set_running(d->running);
      status->set_evaluations_done(d->done);
      status->set_quarantine_reason(d->health->QuarantineReason());
    }
    response->set_build_cache_hits(stats.build_cache_hits);
    response->set_build_cache_misses(stats.build_cache_misses);
    response->set_baseline_cache_hits(stats.baseline_cache_hits);
    response->set_baseline_cache_misses(stats.baseline_cache_misses);
    response->set_quarantine_reason(QuarantineReason());
    std::lock_guard<std::mutex> lock(mu_);
    response->set_running(static_cast<int32_t>(running_));
    response->set_queued(static_cast<int32_t>(queued_));
    return Status::OK;
  }

 private:
  // Authorisation and the request size limit, shared by every call.
  Status Admit(ServerContext* ctx, const google::protobuf::Message& request) const {
    if (!config_.token.empty()) {
      auto it = ctx->client_metadata().find("authorization");
      if (it == ctx->client_metadata().end() ||
          std::string(it->second.data(), it->second.size()) != "Bearer " + config_.token)
        return Status(StatusCode::UNAUTHENTICATED, "missing or wrong bearer token");
    }
    if (request.ByteSizeLong() > static_cast<size_t>(config_.max_request_mb) << 20)
      return Status(StatusCode::INVALID_ARGUMENT, "request larger than worker.max_request_mb=" +
                                                      std::to_string(config_.max_request_mb) + " MiB");
    return Status::OK;
  }

  Status Answer(const StatusOr<FileResult>& result, v1::FileResponse* response) {
    if (!result.ok()) return ToGrpc(result.status());
    FileToProto(*result, response);
    return Status::OK;
  }

  Status RunOnWorkspace(ServerContext* ctx, const std::string& id, const std::string& key, kernel_eval::Stage stage,
                        bool submit, v1::ToolResponse* response) {
    std::string full_key = key.empty() ? "" : id + "/" + key;
    if (!full_key.empty() && tools_.BeginOrGet(full_key, response)) {
      response->set_from_idempotency_cache(true);
      ++idempotent_hits_;
      return Status::OK;
    }
    Status status = [&] {
      std::string refused;
      auto snap = workspaces_.Snap(id, submit, &refused);
      if (!snap.ok()) return ToGrpc(snap.status());
      kernel_eval::Verdict verdict;
      if (!refused.empty()) {  // nothing to build: the agent's mistake, a verdict
        verdict.outcome = kernel_eval::Outcome::kCompileError;
        verdict.stage = kernel_eval::StageName(stage);
        verdict.message = refused;
        verdict.reward = stage == kernel_eval::Stage::kProfile ? -1 : 0;
      } else if (Status s = Judge(ctx, snap->task, snap->candidate, stage, &verdict); !s.ok()) {
        return s;
      }
      response->set_text(verdict.AgentReport());
      ToProto(verdict, response->mutable_verdict());
      response->set_worker(name_);
      return Status::OK;
    }();
    if (!full_key.empty()) {
      if (status.ok())
        tools_.Finish(full_key, *response);
      else
        tools_.Abandon(full_key);
    }
    return status;
  }

  // Empty while some device is healthy; else every device's reason.
  std::string QuarantineReason() const {
    std::string reasons;
    for (const auto& d : devices_) {
      std::string why = d->health->QuarantineReason();
      if (why.empty()) return "";
      reasons += (reasons.empty() ? "" : "; ") + std::string("device ") +
                 std::to_string(d->judge->config().device) + ": " + why;
    }
    return reasons;
  }

  // The healthy device with the fewest running evaluations, or null.
  Device* PickDevice() {
    Device* best = nullptr;
    for (auto& d : devices_)
      if (d->health->QuarantineReason().empty() && (best == nullptr || d->running < best->running)) best = d.get();
    return best;
  }

  // Runs the judge in an evaluation slot. A verdict that suggests the device
  // was hurt is only returned once a probe says the device is fine: a sick
  // device's verdict is the device's fault, never a reward.
  Status Judge(ServerContext* ctx, const kernel_eval::Task& task, const kernel_eval::Candidate& candidate,
               kernel_eval::Stage stage, kernel_eval::Verdict* out) {
    if (std::string why = QuarantineReason(); !why.empty())
      return Status(StatusCode::UNAVAILABLE, "device quarantined: " + why);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (running_ + queued_ >= config_.max_concurrent + config_.max_queue)
        return Status(StatusCode::RESOURCE_EXHAUSTED, "worker queue is full");
      ++queued_;
      slot_cv_.wait(lock, [&] { return running_ < config_.max_concurrent || ctx->IsCancelled(); });
      --queued_;
      if (ctx->IsCancelled()) return Status(StatusCode::CANCELLED, "cancelled while queued");
      ++running_;
    }
    Device* device = PickDevice();
    if (device == nullptr) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        --running_;
      }
      slot_cv_.notify_one();
      return Status(StatusCode::UNAVAILABLE, "device quarantined: " + QuarantineReason());
    }
    ++device->running;
    auto verdict = device->judge->Evaluate(task, candidate, [ctx] { return ctx->IsCancelled(); }, stage);
    --device->running;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
    }
    slot_cv_.notify_one();
    DeviceHealth& health = *device->health;
    if (!verdict.ok() && verdict.status().code() == cuda_agent::StatusCode::kCancelled)
      return Status(StatusCode::CANCELLED, "cancelled by the client; its sandboxes were stopped");
    bool caller_error = !verdict.ok() && verdict.status().code() == cuda_agent::StatusCode::kInvalidArgument;
    if (!caller_error && health.Suspect(verdict.ok() ? &*verdict : nullptr)) {
      std::string why = health.Probe(verdict.ok() ? std::string("a ") + kernel_eval::OutcomeName(verdict->outcome) +
                                                         " verdict"
                                                   : "a judge failure");
      if (!why.empty()) return Status(StatusCode::UNAVAILABLE, "device quarantined: " + why);
    }
    if (!verdict.ok()) {
      // A bad task is the caller's error; anything else is ours, and retryable.
      CA_LOG(kWarn) << "evaluation failed: " << verdict.status().ToString();
      return Status(caller_error ? StatusCode::INVALID_ARGUMENT : StatusCode::INTERNAL, verdict.status().message());
    }
    ++evaluations_done_;
    ++device->done;
    *out = std::move(*verdict);
    return Status::OK;
  }

  config::WorkerConfig config_;
  std::string name_;
  std::vector<std::unique_ptr<Device>> devices_;
  IdempotencyCache<v1::EvaluateResponse> evaluations_;
  IdempotencyCache<v1::ToolResponse> tools_;
  WorkspaceStore workspaces_;
  std::mutex mu_;
  std::condition_variable slot_cv_;
  int64_t running_ = 0;  // guarded by mu_
  int64_t queued_ = 0;   // guarded by mu_
  std::atomic<int64_t> evaluations_done_{0};
  std::atomic<int64_t> idempotent_hits_{0};
};

}  // namespace

bool IsLoopbackAddress(const std::string& host_port) {
  std::string host = HostOf(host_port);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

struct WorkerServer::Impl {
  std::unique_ptr<WorkerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const config::WorkerConfig& config,
                                                            std::shared_ptr<kernel_eval::Judge> judge) {
  return Start(config, std::vector<std::shared_ptr<kernel_eval::Judge>>{std::move(judge)});
}

StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const config::WorkerConfig& config,
                                                            std::vector<std::shared_ptr<kernel_eval::Judge>> judges) {
  if (judges.empty()) return InvalidArgument("a worker needs at least one judge");
  bool tls = !config.tls_cert_path.empty() || !config.tls_key_path.empty();
  if (!IsLoopbackAddress(config.listen) && (config.token.empty() || !tls) && !config.allow_insecure_remote)
    return InvalidArgument("worker.listen " + config.listen +
                           " is not a loopback address: set worker.token and worker.tls_cert_path/tls_key_path, "
                           "or worker.allow_insecure_remote=true to serve it without them");
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls) {
    auto cert = ReadFile(config.tls_cert_path);
    auto key = ReadFile(config.tls_key_path);
    if (!cert.ok() || !key.ok())
      return InvalidArgument("cannot read worker.tls_cert_path " + config.tls_cert_path + " or tls_key_path " +
                             config.tls_key_path);
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back({*key, *cert});
    if (!config.tls_client_ca_path.empty()) {
      auto ca = ReadFile(config.tls_client_ca_path);
      if (!ca.ok()) return InvalidArgument("cannot read worker.tls_client_ca_path " + config.tls_client_ca_path);
      options.pem_root_certs = *ca;
      options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    credentials = grpc::SslServerCredentials(options);
  }
  std::unique_ptr<WorkerServer> server(new WorkerServer());
  server->impl_ = std::make_unique<Impl>();
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_request_mb << 20) + (1 << 20));
  std::string host = HostOf(config.listen);
  server->impl_->address = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":";
  // The service needs its name before it serves; the port is known only after
  // BuildAndStart, so names default to the requested address.
  std::string name = config.name.empty() ? config.listen : config.name;
  server->impl_->service = std::make_unique<WorkerService>(config, std::move(judges), name);
  builder.RegisterService(server->impl_->service.get());
  server->impl_->server = builder.BuildAndStart();
  if (!server->impl_->server || port == 0) return Unavailable("cannot listen on " + config.listen);
  server->impl_->address += std::to_string(port);
  CA_LOG(kInfo) << "worker serving on " << server->impl_->address;
  return server;
}

WorkerServer::~WorkerServer() {
  if (impl_ && impl_->server) Shutdown(0);
}

const std::string& WorkerServer::address() const { return impl_->address; }

void WorkerServer::Shutdown(double grace_s) {
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
}

void WorkerServer::Wait() { impl_->server->Wait(); }

}  // namespace cuda_agent::rpc
