#include "cuda_agent/rpc/worker_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>

#include "convert.h"
#include "cuda_agent/util/file.h"
#include "cuda_agent/util/log.h"
#include "cuda_agent/v1/worker.grpc.pb.h"

namespace cuda_agent::rpc {
namespace {

using Clock = std::chrono::steady_clock;

// Failures of the call that another worker may not have.
bool Retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED ||
         code == grpc::StatusCode::RESOURCE_EXHAUSTED || code == grpc::StatusCode::INTERNAL ||
         code == grpc::StatusCode::ABORTED || code == grpc::StatusCode::UNKNOWN;
}

Status FromGrpc(const grpc::Status& s, const std::string& endpoint) {
  std::string msg = endpoint + ": " + s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return InvalidArgument(msg);
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return FailedPrecondition(msg);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return DeadlineExceeded(msg);
    default:
      return Unavailable(msg);
  }
}

}  // namespace

struct WorkerClient::Impl {
  struct Endpoint {
    std::string address;
    std::unique_ptr<v1::Worker::Stub> stub;
    std::atomic<int> in_flight{0};
    std::atomic<int64_t> unhealthy_until_ms{0};  // steady-clock ms; skipped until then
  };
  config::ClientConfig config;
  std::vector<std::unique_ptr<Endpoint>> endpoints;

  void AddAuth(grpc::ClientContext* ctx) const {
    if (!config.token.empty()) ctx->AddMetadata("authorization", "Bearer " + config.token);
  }

  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
  }

  // The least-loaded endpoint not yet tried for this request, healthy ones first.
  Endpoint* Pick(const std::set<Endpoint*>& tried) {
    Endpoint* best = nullptr;
    auto score = [](Endpoint* e) {
      bool sick = e->unhealthy_until_ms.load() > NowMs();
      return std::make_pair(sick ? 1 : 0, e->in_flight.load());
    };
    for (auto& e : endpoints) {
      if (tried.count(e.get())) continue;
      if (best == nullptr || score(e.get()) < score(best)) best = e.get();
    }
    return best;
  }
};

StatusOr<std::unique_ptr<WorkerClient>> WorkerClient::Create(const config::ClientConfig& config) {
  if (config.endpoints.empty()) return InvalidArgument("client.endpoints is empty");
  std::unique_ptr<WorkerClient> client(new WorkerClient());
  client->impl_ = std::make_unique<Impl>();
  client->impl_->config = config;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!config.tls_ca_path.empty()) {
    grpc::SslCredentialsOptions options;
    auto ca = ReadFile(config.tls_ca_path);
    if (!ca.ok()) return InvalidArgument("cannot read client.tls_ca_path " + config.tls_ca_path);
    options.pem_root_certs = *ca;
    if (!config.tls_cert_path.empty()) {
      auto cert = ReadFile(config.tls_cert_path);
      auto key = ReadFile(config.tls_key_path);
      if (!cert.ok() || !key.ok()) return InvalidArgument("cannot read client.tls_cert_path or tls_key_path");
      options.pem_cert_chain = *cert;
      options.pem_private_key = *key;
    }
    credentials = grpc::SslCredentials(options);
  }
  for (const auto& address : config.endpoints) {
    auto e = std::make_unique<Impl::Endpoint>();
    e->address = address;
    e->stub = v1::Worker::NewStub(grpc::CreateCustomChannel(address, credentials, args));
    client->impl_->endpoints.push_back(std::move(e));
  }
  return client;
}

WorkerClient::~WorkerClient() = default;

StatusOr<EvaluateResult> WorkerClient::Evaluate(const kernel_eval::Task& task, const kernel_eval::Candidate& candidate,
                                                const std::string& idempotency_key) {
  v1::EvaluateRequest request;
  request.set_idempotency_key(idempotency_key);
  CA_RETURN_IF_ERROR(ToProto(task, candidate, &request));
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(impl_->config.deadline_s * 1000));
  std::set<Impl::Endpoint*> tried;
  Status last = Unavailable("no worker tried");
  for (int attempt = 1; attempt <= impl_->config.max_attempts; ++attempt) {
    if (tried.size() == impl_->endpoints.size()) tried.clear();  // all tried: go round again
    Impl::Endpoint* e = impl_->Pick(tried);
    tried.insert(e);
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    impl_->AddAuth(&ctx);
    v1::EvaluateResponse response;
    ++e->in_flight;
    grpc::Status s = e->stub->Evaluate(&ctx, request, &response);
    --e->in_flight;
    if (s.ok()) {
      EvaluateResult result;
      result.verdict = FromProto(response.verdict());
      result.worker = response.worker();
      result.from_idempotency_cache = response.from_idempotency_cache();
      result.attempts = attempt;
      return result;
    }
    last = FromGrpc(s, e->address);
    if (!Retryable(s.error_code()) || std::chrono::system_clock::now() >= deadline) return last;
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::CANCELLED)
      e->unhealthy_until_ms = Impl::NowMs() + 5000;
    CA_LOG(kWarn) << "evaluation attempt " << attempt << " on " << e->address << " failed (" << s.error_message()
                  << "); retrying elsewhere";
  }
  return last;
}

StatusOr<WorkerInfo> WorkerClient::Info(const std::string& endpoint) {
  for (auto& e : impl_->endpoints) {
    if (e->address != endpoint) continue;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    impl_->AddAuth(&ctx);
    v1::InfoRequest request;
    v1::InfoResponse response;
    grpc::Status s = e->stub->Info(&ctx, request, &response);
    if (!s.ok()) return FromGrpc(s, endpoint);
    WorkerInfo info;
    info.worker = response.worker();
    info.backend = response.backend();
    info.device_name = response.device_name();
    info.torch_version = response.torch_version();
    info.isolation = response.isolation();
    info.max_concurrent = response.max_concurrent();
    info.evaluations_done = response.evaluations_done();
    info.idempotent_hits = response.idempotent_hits();
    return info;
  }
  return InvalidArgument("endpoint " + endpoint + " is not in client.endpoints");
}

}  // namespace cuda_agent::rpc
