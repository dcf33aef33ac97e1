#include "cuda_agent/rpc/worker_client.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
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
    case grpc::StatusCode::NOT_FOUND:
      return NotFound(msg);
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return ResourceExhausted(msg);
    default:
      return Unavailable(msg);
  }
}

// "dns:name:port" -> one "address:port" per address the name resolves to.
StatusOr<std::vector<std::string>> ExpandEndpoints(const std::vector<std::string>& endpoints) {
  std::vector<std::string> out;
  for (const auto& e : endpoints) {
    if (e.rfind("dns:", 0) != 0) {
      out.push_back(e);
      continue;
    }
    std::string rest = e.substr(4);
    while (rest.rfind("/", 0) == 0) rest.erase(0, 1);  // dns:///name:port
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos) return InvalidArgument("client endpoint '" + e + "' has no port");
    std::string name = rest.substr(0, colon), port = rest.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int rc = ::getaddrinfo(name.c_str(), port.c_str(), &hints, &found); rc != 0)
      return InvalidArgument("client endpoint '" + e + "': cannot resolve " + name + ": " + ::gai_strerror(rc));
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      char host[INET6_ADDRSTRLEN] = {};
      const void* where = a->ai_family == AF_INET6
                              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr)
                              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr);
      if (!::inet_ntop(a->ai_family, where, host, sizeof(host))) continue;
      std::string address = a->ai_family == AF_INET6 ? "[" + std::string(host) + "]:" + port : host + (":" + port);
      if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(address);
    }
    ::freeaddrinfo(found);
  }
  if (out.empty()) return InvalidArgument("client.endpoints resolved to no address");
  return out;
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

  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
  }

  std::chrono::system_clock::time_point Deadline() const {
    return std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(config.deadline_s * 1000));
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

  // One call on `e`: auth, deadline, load accounting; an endpoint that cannot
  // be reached (or is quarantined) is avoided for a while.
  template <class Fn>
  grpc::Status Call(Endpoint* e, std::chrono::system_clock::time_point deadline, Fn fn) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    if (!config.token.empty()) ctx.AddMetadata("authorization", "Bearer " + config.token);
    ++e->in_flight;
    grpc::Status s = fn(e, &ctx);
    --e->in_flight;
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::CANCELLED)
      e->unhealthy_until_ms = NowMs() + 5000;
    return s;
  }

  // Runs `fn` on the least-loaded endpoint, then on others while it fails for
  // a reason another worker may not share. Returns the endpoint that answered.
  template <class Fn>
  StatusOr<Endpoint*> WithRetries(const std::string& what, Fn fn, int* attempts) {
    auto deadline = Deadline();
    std::set<Endpoint*> tried;
    Status last = Unavailable("no worker tried");
    for (int attempt = 1; attempt <= config.max_attempts; ++attempt) {
      if (tried.size() == endpoints.size()) tried.clear();  // all tried: go round again
      Endpoint* e = Pick(tried);
      tried.insert(e);
      grpc::Status s = Call(e, deadline, fn);
      if (attempts) *attempts = attempt;
      if (s.ok()) return e;
      last = FromGrpc(s, e->address);
      if (!Retryable(s.error_code()) || std::chrono::system_clock::now() >= deadline) return last;
      CA_LOG(kWarn) << what << " attempt " << attempt << " on " << e->address << " failed (" << s.error_message()
                    << "); retrying elsewhere";
    }
    return last;
  }
};

StatusOr<std::unique_ptr<WorkerClient>> WorkerClient::Create(const config::ClientConfig& config) {
  if (config.endpoints.empty()) return InvalidArgument("client.endpoints is empty");
  CA_ASSIGN_OR_RETURN(std::vector<std::string> addresses, ExpandEndpoints(config.endpoints));
  std::unique_ptr<WorkerClient> client(new WorkerClient());
  client->impl_ = std::make_shared<Impl>();
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
  for (const auto& address : addresses) {
    auto e = std::make_unique<Impl::Endpoint>();
    e->address = address;
    e->stub = v1::Worker::NewStub(grpc::CreateCustomChannel(address, credentials, args));
    client->impl_->endpoints.push_back(std::move(e));
  }
  return client;
}

WorkerClient::~WorkerClient() = default;

std::vector<std::string> WorkerClient::endpoints() const {
  std::vector<std::string> out;
  for (const auto& e : impl_->endpoints) out.push_back(e->address);
  return out;
}

StatusOr<EvaluateResult> WorkerClient::Evaluate(const kernel_eval::Task& task, const kernel_eval::Candidate& candidate,
                                                const std::string& idempotency_key) {
  v1::EvaluateRequest request;
  request.set_idempotency_key(idempotency_key);
  CA_RETURN_IF_ERROR(ToProto(task, candidate, &request));
  v1::EvaluateResponse response;
  EvaluateResult result;
  CA_RETURN_IF_ERROR(impl_->WithRetries(
                              "evaluation",
                              [&](Impl::Endpoint* e, grpc::ClientContext* ctx) {
                                return e->stub->Evaluate(ctx, request, &response);
                              },
                              &result.attempts)
                         .status());
  result.verdict = FromProto(response.verdict());
  result.worker = response.worker();
  result.from_idempotency_cache = response.from_idempotency_cache();
  return result;
}

StatusOr<WorkerInfo> WorkerClient::Info(const std::string& endpoint) {
  for (auto& e : impl_->endpoints) {
    if (e->address != endpoint) continue;
    v1::InfoResponse r;
    grpc::Status s = impl_->Call(e.get(), std::chrono::system_clock::now() + std::chrono::seconds(10),
                                 [&](Impl::Endpoint* ep, grpc::ClientContext* ctx) {
                                   return ep->stub->Info(ctx, v1::InfoRequest(), &r);
                                 });
    if (!s.ok()) return FromGrpc(s, endpoint);
    WorkerInfo info;
    info.worker = r.worker();
    info.backend = r.backend();
    info.device_name = r.device_name();
    info.torch_version = r.torch_version();
    info.isolation = r.isolation();
    info.toolchain = r.toolchain();
    info.max_concurrent = r.max_concurrent();
    info.running = r.running();
    info.queued = r.queued();
    info.workspaces = r.workspaces();
    info.evaluations_done = r.evaluations_done();
    info.idempotent_hits = r.idempotent_hits();
    info.build_cache_hits = r.build_cache_hits();
    info.build_cache_misses = r.build_cache_misses();
    info.baseline_cache_hits = r.baseline_cache_hits();
    info.baseline_cache_misses = r.baseline_cache_misses();
    info.quarantine_reason = r.quarantine_reason();
    for (const auto& d : r.devices())
      info.devices.push_back({d.index(), d.name(), d.quarantine_reason(), d.running(), d.evaluations_done()});
    return info;
  }
  return InvalidArgument("endpoint " + endpoint + " is not in client.endpoints");
}

// --- workspaces ---

struct RemoteWorkspace::Impl {
  std::shared_ptr<WorkerClient::Impl> client;
  v1::Task task;
  std::map<std::string, std::string> files;  // the candidate as the worker holds it
  WorkerClient::Impl::Endpoint* endpoint = nullptr;
  std::string id;  // empty: must be (re-)created before the next call
  int moves = 0;

  Status Create() {
    v1::CreateWorkspaceRequest request;
    *request.mutable_task() = task;
    for (const auto& [path, content] : files) {
      auto* f = request.add_files();
      f->set_path(path);
      f->set_content(content);
    }
    v1::CreateWorkspaceResponse response;
    CA_ASSIGN_OR_RETURN(endpoint, client->WithRetries(
                                      "workspace creation",
                                      [&](WorkerClient::Impl::Endpoint* e, grpc::ClientContext* ctx) {
                                        return e->stub->CreateWorkspace(ctx, request, &response);
                                      },
                                      nullptr));
    id = response.workspace_id();
    return Status::Ok();
  }

  // Runs `fn(stub, ctx, id)` on the workspace's worker; when that worker fails
  // or lost the workspace, moves the workspace to another worker and retries.
  template <class Fn>
  Status Do(const std::string& what, Fn fn) {
    auto deadline = client->Deadline();
    Status last = Unavailable("no attempt");
    for (int attempt = 1; attempt <= client->config.max_attempts; ++attempt) {
      if (id.empty()) {
        CA_RETURN_IF_ERROR(Create());
        ++moves;
      }
      grpc::Status s = client->Call(endpoint, deadline, [&](WorkerClient::Impl::Endpoint* e, grpc::ClientContext* ctx) {
        return fn(e->stub.get(), ctx, id);
      });
      if (s.ok()) return Status::Ok();
      last = FromGrpc(s, endpoint->address);
      bool lost = s.error_code() == grpc::StatusCode::NOT_FOUND;
      if ((!lost && !Retryable(s.error_code())) || std::chrono::system_clock::now() >= deadline) return last;
      CA_LOG(kWarn) << what << " on workspace " << id << " at " << endpoint->address << " failed ("
                    << s.error_message() << "); moving the workspace to another worker";
      id.clear();
    }
    return last;
  }

  StatusOr<FileResult> FileCall(const std::string& what,
                                const std::function<grpc::Status(v1::Worker::Stub*, grpc::ClientContext*,
                                                                 const std::string&, v1::FileResponse*)>& fn) {
    v1::FileResponse response;
    CA_RETURN_IF_ERROR(Do(what, [&](v1::Worker::Stub* stub, grpc::ClientContext* ctx, const std::string& ws) {
      response.Clear();
      return fn(stub, ctx, ws, &response);
    }));
    FileResult r{response.ok(), response.message(), response.content(), {}};
    for (const auto& f : response.files()) r.files.push_back({f.path(), f.size(), f.read_only()});
    return r;
  }

  StatusOr<ToolResult> ToolCall(const std::string& what,
                                const std::function<grpc::Status(v1::Worker::Stub*, grpc::ClientContext*,
                                                                 const std::string&, v1::ToolResponse*)>& fn) {
    v1::ToolResponse response;
    CA_RETURN_IF_ERROR(Do(what, [&](v1::Worker::Stub* stub, grpc::ClientContext* ctx, const std::string& ws) {
      response.Clear();
      return fn(stub, ctx, ws, &response);
    }));
    return ToolResult{response.text(), FromProto(response.verdict()), response.worker(),
                      response.from_idempotency_cache()};
  }
};

StatusOr<std::unique_ptr<RemoteWorkspace>> WorkerClient::OpenWorkspace(
    const kernel_eval::Task& task, const std::map<std::string, std::string>& files) {
  std::unique_ptr<RemoteWorkspace> ws(new RemoteWorkspace());
  ws->impl_ = std::make_unique<RemoteWorkspace::Impl>();
  ws->impl_->client = impl_;
  ws->impl_->task.set_name(task.name);
  ws->impl_->task.set_source(task.source);
  ws->impl_->files = files;
  CA_RETURN_IF_ERROR(ws->impl_->Create());
  return ws;
}

RemoteWorkspace::~RemoteWorkspace() {
  if (impl_ && !impl_->id.empty()) (void)Close();
}

const std::string& RemoteWorkspace::id() const { return impl_->id; }
const std::string& RemoteWorkspace::worker() const { return impl_->endpoint->address; }
int RemoteWorkspace::moves() const { return impl_->moves; }

StatusOr<FileResult> RemoteWorkspace::Write(const std::string& path, const std::string& content) {
  v1::WriteFileRequest request;
  request.set_path(path);
  request.set_content(content);
  auto r = impl_->FileCall("write", [&](v1::Worker::Stub* stub, grpc::ClientContext* ctx, const std::string& ws,
                                        v1::FileResponse* out) {
    request.set_workspace_id(ws);
    return stub->WriteFile(ctx, request, out);
  });
  if (r.ok() && r->ok) impl_->files[path] = content;
  return r;
}

StatusOr<FileResult> RemoteWorkspace::Edit(const std::string& path, const std::string& old_text,
                                           const std::string& new_text, bool replace_all) {
  v1::EditFileRequest request;
  request.set_path(path);
  request.set_old_text(old_text);
  request.set_new_text(new_text);
  request.set_replace_all(replace_all);
  auto r = impl_->FileCall("edit", [&](v1::Worker::Stub* stub, grpc::ClientContext* ctx, const std::string& ws,
                                       v1::FileResponse* out) {
    request.set_workspace_id(ws);
    return stub->EditFile(ctx, request, out);
  });
  if (r.ok() && r->ok && impl_->files.count(path)) ApplyEdit(&impl_->files[path], old_text, new_text, replace_all);
  return r;
}

StatusOr<FileResult> RemoteWorkspace::Read(const std::string& path) {
  v1::ReadFileRequest request;
  request.set_path(path);
  return impl_->FileCall("read", [&](v1::Worker::Stub* stub, grpc::ClientContext* ctx, const std::string& ws,
                                     v1::FileResponse* out) {
    request.set_workspace_id(ws);
    return stub->ReadFile(ctx, request, out);
  });
}

StatusOr<FileResult> RemoteWorkspace::List() {
  v1::ListFilesRequest request;
  return impl_->FileCall("list", [&](v1::Worker::Stub* stub, grpc::ClientContext* ctx, const std::string& ws,
                                     v1::FileResponse* out) {
    request.set_workspace_id(ws);
    return stub->ListFiles(ctx, request, out);
  });
}

StatusOr<ToolResult> RemoteWorkspace::Run(kernel_eval::Stage tool, const std::string& key) {
  v1::RunToolRequest request;
  request.set_tool(tool == kernel_eval::Stage::kCompile  ? v1::COMPILE
                   : tool == kernel_eval::Stage::kVerify ? v1::VERIFY
                                                         : v1::PROFILE);
  request.set_idempotency_key(key);
  return impl_->ToolCall(kernel_eval::StageName(tool), [&](v1::Worker::Stub* stub, grpc::ClientContext* ctx,
                                                           const std::string& ws, v1::ToolResponse* out) {
    request.set_workspace_id(ws);
    return stub->RunTool(ctx, request, out);
  });
}

StatusOr<ToolResult> RemoteWorkspace::Submit(const std::string& key) {
  v1::SubmitRequest request;
  request.set_idempotency_key(key);
  return impl_->ToolCall("submit", [&](v1::Worker::Stub* stub, grpc::ClientContext* ctx, const std::string& ws,
                                       v1::ToolResponse* out) {
    request.set_workspace_id(ws);
    return stub->Submit(ctx, request, out);
  });
}

Status RemoteWorkspace::Close() {
  if (impl_->id.empty()) return Status::Ok();
  v1::CloseWorkspaceRequest request;
  request.set_workspace_id(impl_->id);
  v1::CloseWorkspaceResponse response;
  grpc::Status s = impl_->client->Call(
      impl_->endpoint, std::chrono::system_clock::now() + std::chrono::seconds(10),
      [&](WorkerClient::Impl::Endpoint* e, grpc::ClientContext* ctx) {
        return e->stub->CloseWorkspace(ctx, request, &response);
      });
  impl_->id.clear();
  return s.ok() || s.error_code() == grpc::StatusCode::NOT_FOUND ? Status::Ok() : FromGrpc(s, impl_->endpoint->address);
}

}  // namespace cuda_agent::rpc
