#include "cuda_agent/rpc/worker_server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "convert.h"
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

// Finished responses by idempotency key, oldest evicted first. Thread-safe.
class IdempotencyCache {
 public:
  explicit IdempotencyCache(size_t capacity) : capacity_(capacity) {}

  // If `key` finished, copies its response and returns true. If it is running,
  // waits for it. Otherwise marks it running and returns false: the caller must
  // then call Finish() or Abandon().
  bool BeginOrGet(const std::string& key, v1::EvaluateResponse* out) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      auto it = done_.find(key);
      if (it != done_.end()) {
        *out = it->second;
        return true;
      }
      if (!running_.count(key)) break;
      cv_.wait(lock);
    }
    running_.insert(key);
    return false;
  }

  void Finish(const std::string& key, const v1::EvaluateResponse& response) {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(key);
    if (capacity_ > 0) {
      done_[key] = response;
      order_.push_back(key);
      while (order_.size() > capacity_) {
        done_.erase(order_.front());
        order_.pop_front();
      }
    }
    cv_.notify_all();
  }

  void Abandon(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(key);
    cv_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, v1::EvaluateResponse> done_;  // guarded by mu_
  std::deque<std::string> order_;                     // guarded by mu_
  std::set<std::string> running_;                     // guarded by mu_
};

class WorkerService final : public v1::Worker::Service {
 public:
  WorkerService(config::WorkerConfig config, std::shared_ptr<kernel_eval::Judge> judge, std::string name)
      : config_(std::move(config)),
        judge_(std::move(judge)),
        name_(std::move(name)),
        idempotency_(static_cast<size_t>(config_.idempotency_entries)) {}

  Status Evaluate(ServerContext* ctx, const v1::EvaluateRequest* request, v1::EvaluateResponse* response) override {
    if (Status auth = Authorize(ctx); !auth.ok()) return auth;
    if (request->ByteSizeLong() > static_cast<size_t>(config_.max_request_mb) << 20)
      return Status(StatusCode::INVALID_ARGUMENT, "request larger than worker.max_request_mb");
    const std::string& key = request->idempotency_key();
    if (!key.empty() && idempotency_.BeginOrGet(key, response)) {
      response->set_from_idempotency_cache(true);
      ++idempotent_hits_;
      return Status::OK;
    }
    Status status = Run(ctx, *request, response);
    if (!key.empty()) {
      if (status.ok())
        idempotency_.Finish(key, *response);
      else
        idempotency_.Abandon(key);
    }
    return status;
  }

  Status Health(ServerContext* ctx, const v1::HealthRequest*, v1::HealthResponse* response) override {
    if (Status auth = Authorize(ctx); !auth.ok()) return auth;
    std::lock_guard<std::mutex> lock(mu_);
    response->set_serving(true);
    response->set_queued(queued_);
    response->set_running(running_);
    return Status::OK;
  }

  Status Info(ServerContext* ctx, const v1::InfoRequest*, v1::InfoResponse* response) override {
    if (Status auth = Authorize(ctx); !auth.ok()) return auth;
    response->set_worker(name_);
    response->set_backend(judge_->backend());
    response->set_device_name(judge_->python().device_name);
    response->set_torch_version(judge_->python().torch_version);
    response->set_isolation(judge_->sandbox().isolation().description);
    response->set_max_concurrent(static_cast<int>(config_.max_concurrent));
    response->set_evaluations_done(evaluations_done_);
    response->set_idempotent_hits(idempotent_hits_);
    return Status::OK;
  }

 private:
  Status Authorize(ServerContext* ctx) const {
    if (config_.token.empty()) return Status::OK;
    auto it = ctx->client_metadata().find("authorization");
    if (it == ctx->client_metadata().end() ||
        std::string(it->second.data(), it->second.size()) != "Bearer " + config_.token)
      return Status(StatusCode::UNAUTHENTICATED, "missing or wrong bearer token");
    return Status::OK;
  }

  Status Run(ServerContext* ctx, const v1::EvaluateRequest& request, v1::EvaluateResponse* response) {
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
    Status status = EvaluateNow(ctx, request, response);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
    }
    slot_cv_.notify_one();
    return status;
  }

  Status EvaluateNow(ServerContext* ctx, const v1::EvaluateRequest& request, v1::EvaluateResponse* response) {
    auto dir = TempDir::Create(std::filesystem::temp_directory_path() / "cuda-agent-requests", "req-");
    if (!dir.ok()) return Status(StatusCode::INTERNAL, dir.status().message());
    auto m = Materialize(request, dir->path());
    if (!m.ok()) return Status(StatusCode::INVALID_ARGUMENT, m.status().message());
    auto verdict = judge_->Evaluate(m->task, m->candidate, [ctx] { return ctx->IsCancelled(); });
    if (!verdict.ok() && verdict.status().code() == cuda_agent::StatusCode::kCancelled)
      return Status(StatusCode::CANCELLED, "cancelled by the client; its sandboxes were stopped");
    if (!verdict.ok()) {
      // A bad task is the caller's error; anything else is ours, and retryable.
      bool caller = verdict.status().code() == cuda_agent::StatusCode::kInvalidArgument;
      CA_LOG(kWarn) << "evaluation failed: " << verdict.status().ToString();
      return Status(caller ? StatusCode::INVALID_ARGUMENT : StatusCode::INTERNAL, verdict.status().message());
    }
    ToProto(*verdict, response->mutable_verdict());
    response->set_worker(name_);
    ++evaluations_done_;
    return Status::OK;
  }

  config::WorkerConfig config_;
  std::shared_ptr<kernel_eval::Judge> judge_;
  std::string name_;
  IdempotencyCache idempotency_;
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
  server->impl_->service = std::make_unique<WorkerService>(config, std::move(judge), name);
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
