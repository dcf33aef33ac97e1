// The Worker service over loopback with the real judge (cpu backend).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "cuda_agent/config/config.h"
#include "cuda_agent/rpc/worker_client.h"
#include "cuda_agent/rpc/worker_server.h"
#include "cuda_agent/v1/worker.grpc.pb.h"

namespace cuda_agent::rpc {
namespace {
namespace fs = std::filesystem;
using kernel_eval::Outcome;
const fs::path kFixtures = fs::path(CUDA_AGENT_TEST_FIXTURES) / "kernel_eval" / "fixtures";

std::shared_ptr<kernel_eval::Judge> MakeJudge() {
  auto config = config::LoadConfig("", {"judge.backend=cpu", std::string("judge.cache_dir=") + CUDA_AGENT_TEST_CACHE,
                                        "judge.warmup_trials=2", "judge.timed_trials=10"});
  EXPECT_TRUE(config.ok());
  auto judge = kernel_eval::Judge::Create(config->judge, config->sandbox);
  EXPECT_TRUE(judge.ok()) << judge.status().ToString();
  return std::shared_ptr<kernel_eval::Judge>(std::move(judge).value());
}

std::unique_ptr<WorkerServer> Serve(const std::string& name, std::shared_ptr<kernel_eval::Judge> judge,
                                    const std::string& token = "", int64_t max_request_mb = 16,
                                    std::function<void(config::WorkerConfig*)> edit = nullptr) {
  config::WorkerConfig wc;
  wc.listen = "127.0.0.1:0";
  wc.name = name;
  wc.max_concurrent = 2;
  wc.token = token;
  wc.max_request_mb = max_request_mb;
  wc.workspace_dir = (fs::temp_directory_path() / ("ws-test-" + std::to_string(::getpid()) + "-" + name)).string();
  if (edit) edit(&wc);
  auto server = WorkerServer::Start(wc, std::move(judge));
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return std::move(server).value();
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the judge's sandbox needs root";
    judge_ = MakeJudge();
    a_ = Serve("A", judge_);
    b_ = Serve("B", MakeJudge());
    task_ = kernel_eval::LoadTask(kFixtures / "tasks" / "relu.py").value();
  }

  std::unique_ptr<WorkerClient> Client(std::vector<std::string> endpoints, std::string token = "") {
    config::ClientConfig cc;
    cc.endpoints = std::move(endpoints);
    cc.token = std::move(token);
    cc.deadline_s = 300;
    auto c = WorkerClient::Create(cc);
    EXPECT_TRUE(c.ok());
    return std::move(c).value();
  }

  kernel_eval::Candidate Load(const std::string& rel) { return kernel_eval::LoadCandidate(kFixtures / rel).value(); }

  // The servers first: they own the workspaces. Then this process's temporary
  // directories (workspaces, the cancellation test's judge).
  void TearDown() override {
    a_.reset(), b_.reset(), judge_.reset();
    const std::string pid = std::to_string(::getpid());
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::temp_directory_path(), ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("ws-test-" + pid + "-", 0) == 0 || name == "cancel-test-" + pid) fs::remove_all(e.path(), ec);
    }
  }

  std::shared_ptr<kernel_eval::Judge> judge_;
  std::unique_ptr<WorkerServer> a_, b_;
  kernel_eval::Task task_;
};

TEST_F(WorkerTest, HundredConcurrentEvaluationsAreEachAnsweredOnce) {
  auto client = Client({a_->address(), b_->address()});
  struct Job {
    std::string candidate;
    Outcome expected;
  };
  std::vector<Job> jobs;
  for (int i = 0; i < 96; ++i)
    jobs.push_back({i % 2 ? "cheats/torch_in_forward.py" : "cpu/syntax_error.py",
                    i % 2 ? Outcome::kForbidden : Outcome::kCompileError});
  jobs.push_back({"cpu/relu_ok.py", Outcome::kOk});
  jobs.push_back({"cpu/relu_ok.py", Outcome::kOk});
  jobs.push_back({"cpu/relu_wrong.py", Outcome::kIncorrect});
  jobs.push_back({"cheats/try_fallback.py", Outcome::kForbidden});
  std::vector<StatusOr<EvaluateResult>> results(jobs.size(), Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < jobs.size(); ++i) {
    threads.emplace_back(
        [&, i] { results[i] = client->Evaluate(task_, Load(jobs[i].candidate), "job-" + std::to_string(i)); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status().ToString();
    EXPECT_EQ(results[i]->verdict.outcome, jobs[i].expected)
        << i << " " << jobs[i].candidate << ": " << results[i]->verdict.message;
    EXPECT_FALSE(results[i]->from_idempotency_cache);
  }
  auto ia = client->Info(a_->address()), ib = client->Info(b_->address());
  ASSERT_TRUE(ia.ok() && ib.ok());
  EXPECT_EQ(ia->evaluations_done + ib->evaluations_done, 100) << "an evaluation ran twice or was lost";
  EXPECT_GT(ia->evaluations_done, 10) << "load was not spread";
  EXPECT_GT(ib->evaluations_done, 10) << "load was not spread";
  EXPECT_EQ(ia->backend, "cpu");
}

TEST_F(WorkerTest, RetryWithTheSameKeyGetsTheFirstResult) {
  auto client = Client({a_->address()});
  auto first = client->Evaluate(task_, Load("cheats/torch_in_forward.py"), "same-key");
  auto second = client->Evaluate(task_, Load("cheats/torch_in_forward.py"), "same-key");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE(first->from_idempotency_cache);
  EXPECT_TRUE(second->from_idempotency_cache);
  EXPECT_EQ(first->verdict.message, second->verdict.message);
  EXPECT_EQ(client->Info(a_->address())->evaluations_done, 1);
}

TEST_F(WorkerTest, AKilledWorkersRequestIsFinishedByTheOther) {
  auto client = Client({a_->address(), b_->address()});
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::seconds(3));  // A is now compiling / verifying
    a_->Shutdown(0);
  });
  auto result = client->Evaluate(task_, Load("cpu/relu_ok.py"), "survives");
  killer.join();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->verdict.outcome, Outcome::kOk) << result->verdict.message;
  EXPECT_EQ(result->worker, "B");
  EXPECT_EQ(result->attempts, 2);
}

TEST_F(WorkerTest, CancellationStopsTheSandboxedProcesses) {
  // A judge of its own, so its sandboxes can be told apart from other tests'.
  std::string work = (fs::temp_directory_path() / ("cancel-test-" + std::to_string(::getpid()))).string();
  auto config = config::LoadConfig("", {"judge.backend=cpu", std::string("judge.cache_dir=") + CUDA_AGENT_TEST_CACHE,
                                        "judge.static_checks=false", "judge.work_dir=" + work});
  ASSERT_TRUE(config.ok());
  auto judge = kernel_eval::Judge::Create(config->judge, config->sandbox);
  ASSERT_TRUE(judge.ok());
  auto server = Serve("C", std::shared_ptr<kernel_eval::Judge>(std::move(judge).value()));
  config::ClientConfig cc;
  cc.endpoints = {server->address()};
  cc.deadline_s = 6;
  cc.max_attempts = 1;
  auto client = WorkerClient::Create(cc).value();
  auto r = client->Evaluate(task_, Load("unlinted/infinite_loop.py"), "forever");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  auto running = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::ifstream f(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(f)), {});
      if (cmd.find(work) != std::string::npos) ++n;
    }
    return n;
  };
  for (int i = 0; i < 100 && running() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(running(), 0) << "sandboxed processes outlived the cancelled request";
}

TEST_F(WorkerTest, TokensAreChecked) {
  auto secured = Serve("S", judge_, "s3cret");
  for (std::string token : {"", "wrong"}) {
    auto client = Client({secured->address()}, token);
    auto r = client->Evaluate(task_, Load("cheats/torch_in_forward.py"), "t-" + token);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("bearer token"), std::string::npos) << r.status().message();
    EXPECT_FALSE(client->Info(secured->address()).ok());
  }
  auto client = Client({secured->address()}, "s3cret");
  auto r = client->Evaluate(task_, Load("cheats/torch_in_forward.py"), "t-right");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->verdict.outcome, Outcome::kForbidden);
}

// A CA, a certificate for 127.0.0.1 and a client certificate signed by it,
// made with the openssl CLI.
struct TestPki {
  explicit TestPki(const fs::path& dir) : dir(dir) {
    fs::create_directories(dir);
    std::string d = dir.string();
    std::string cmd =
        "cd " + d +
        " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca -keyout ca.key "
        "-out ca.pem 2>/dev/null && openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout srv.key "
        "-out srv.csr 2>/dev/null && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > ext.cnf && "
        "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile ext.cnf "
        "-out srv.pem 2>/dev/null && openssl req -newkey rsa:2048 -nodes -subj /CN=trainer -keyout cli.key "
        "-out cli.csr 2>/dev/null && openssl x509 -req -in cli.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-days 1 -out cli.pem 2>/dev/null";
    ok = std::system(cmd.c_str()) == 0;
  }
  fs::path dir;
  bool ok = false;
};

TEST_F(WorkerTest, TlsServesOnlyTls) {
  TestPki pki(fs::temp_directory_path() / ("worker-pki-" + std::to_string(::getpid())));
  ASSERT_TRUE(pki.ok) << "openssl failed";
  config::WorkerConfig wc;
  wc.listen = "127.0.0.1:0";
  wc.name = "T";
  wc.tls_cert_path = pki.dir / "srv.pem";
  wc.tls_key_path = pki.dir / "srv.key";
  auto server = WorkerServer::Start(wc, judge_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  config::ClientConfig tls;
  tls.endpoints = {(*server)->address()};
  tls.tls_ca_path = pki.dir / "ca.pem";
  auto good = WorkerClient::Create(tls).value()->Info((*server)->address());
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->worker, "T");
  // Plain text to the TLS port is refused.
  auto plain = Client({(*server)->address()})->Info((*server)->address());
  EXPECT_FALSE(plain.ok());
  fs::remove_all(pki.dir);
}

TEST_F(WorkerTest, MutualTlsNeedsAClientCertificate) {
  TestPki pki(fs::temp_directory_path() / ("worker-mtls-" + std::to_string(::getpid())));
  ASSERT_TRUE(pki.ok) << "openssl failed";
  config::WorkerConfig wc;
  wc.listen = "127.0.0.1:0";
  wc.name = "M";
  wc.tls_cert_path = pki.dir / "srv.pem";
  wc.tls_key_path = pki.dir / "srv.key";
  wc.tls_client_ca_path = pki.dir / "ca.pem";
  auto server = WorkerServer::Start(wc, judge_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  config::ClientConfig cc;
  cc.endpoints = {(*server)->address()};
  cc.tls_ca_path = pki.dir / "ca.pem";
  EXPECT_FALSE(WorkerClient::Create(cc).value()->Info((*server)->address()).ok()) << "no client certificate";
  cc.tls_cert_path = pki.dir / "cli.pem";
  cc.tls_key_path = pki.dir / "cli.key";
  auto good = WorkerClient::Create(cc).value()->Info((*server)->address());
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->worker, "M");
  fs::remove_all(pki.dir);
}

TEST_F(WorkerTest, DnsEndpointsExpandToEveryAddress) {
  std::string port = a_->address().substr(a_->address().rfind(':') + 1);
  auto client = Client({"dns:localhost:" + port});
  auto endpoints = client->endpoints();
  EXPECT_NE(std::find(endpoints.begin(), endpoints.end(), "127.0.0.1:" + port), endpoints.end());
  auto r = client->Evaluate(task_, Load("cheats/torch_in_forward.py"), "dns");
  ASSERT_TRUE(r.ok()) << r.status().ToString();  // an unreachable ::1, if any, is retried on 127.0.0.1
  EXPECT_EQ(r->verdict.outcome, Outcome::kForbidden);
  config::ClientConfig bad;
  bad.endpoints = {"dns:no-such-host.invalid:1"};
  auto c = WorkerClient::Create(bad);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cannot resolve"), std::string::npos) << c.status().message();
}

TEST_F(WorkerTest, CacheHitsSkipCompilationAndAreReported) {
  auto client = Client({b_->address()});
  auto before = client->Info(b_->address()).value();
  auto first = client->Evaluate(task_, Load("cpu/relu_ok.py"), "cache-1");
  auto second = client->Evaluate(task_, Load("cpu/relu_ok.py"), "cache-2");  // a new key: runs again
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(second->verdict.outcome, Outcome::kOk) << second->verdict.message;
  EXPECT_TRUE(second->verdict.environment.value("compile_cached", false));
  EXPECT_TRUE(second->verdict.compiled.cached) << "the torch.compile baseline is cached too";
  auto after = client->Info(b_->address()).value();
  EXPECT_GE(after.build_cache_hits - before.build_cache_hits, 1);
  EXPECT_GE(after.baseline_cache_hits - before.baseline_cache_hits, 1);
  EXPECT_NE(after.toolchain.find("g++"), std::string::npos) << after.toolchain;
}

TEST_F(WorkerTest, AWorkerWithTwoDevicesSpreadsTheLoad) {
  config::WorkerConfig wc;
  wc.listen = "127.0.0.1:0";
  wc.name = "two";
  wc.max_concurrent = 4;
  wc.workspace_dir = (fs::temp_directory_path() / ("ws-test-" + std::to_string(::getpid()) + "-two")).string();
  auto server = WorkerServer::Start(wc, std::vector<std::shared_ptr<kernel_eval::Judge>>{judge_, MakeJudge()});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto client = Client({(*server)->address()});
  std::vector<std::thread> threads;
  std::atomic<int> forbidden{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      auto r = client->Evaluate(task_, Load("cheats/torch_in_forward.py"), "two-" + std::to_string(i));
      if (r.ok() && r->verdict.outcome == Outcome::kForbidden) ++forbidden;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(forbidden, 8);
  auto info = client->Info((*server)->address()).value();
  ASSERT_EQ(info.devices.size(), 2u);
  EXPECT_GT(info.devices[0].evaluations_done, 0);
  EXPECT_GT(info.devices[1].evaluations_done, 0);
  EXPECT_EQ(info.devices[0].evaluations_done + info.devices[1].evaluations_done, 8);
}

TEST_F(WorkerTest, AQuarantinedDeviceIsNotHandedCandidates) {
  // A worker whose device "has" too little free memory fails its start-up probe.
  auto sick = Serve("sick", judge_, "", 16, [](config::WorkerConfig* wc) {
    wc->min_free_memory_mb = int64_t{1} << 40;
    wc->quarantine_recheck_s = 3600;
  });
  auto client = Client({sick->address(), b_->address()});
  auto info = client->Info(sick->address());
  ASSERT_TRUE(info.ok());
  EXPECT_NE(info->quarantine_reason.find("min_free_memory_mb"), std::string::npos) << info->quarantine_reason;
  auto stub = v1::Worker::NewStub(grpc::CreateChannel(sick->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::HealthResponse health;
  ASSERT_TRUE(stub->Health(&ctx, v1::HealthRequest(), &health).ok());
  EXPECT_FALSE(health.serving());
  for (int i = 0; i < 2; ++i) {
    auto r = client->Evaluate(task_, Load("cheats/torch_in_forward.py"), "q-" + std::to_string(i));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->worker, "B");
  }
  EXPECT_EQ(client->Info(sick->address())->evaluations_done, 0);
}

const char* kRowSumBinding = R"(#include "binding_registry.h"

extern "C" void row_sum_launch(const float* x, float* y, int64_t rows, int64_t cols);

static torch::Tensor row_sum(torch::Tensor x) {
  auto y = torch::empty({x.size(0)}, x.options());
  row_sum_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1));
  return y;
}

REGISTER_BINDING(m) { m.def("row_sum", &row_sum); }
)";

const char* kRowSumKernel = R"(#include <cstdint>

extern "C" void row_sum_launch(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    y[r] = static_cast<float>(s) MISSING_SEMICOLON
  }
}
)";

const char* kRowSumModel = R"(import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.row_sum(x.contiguous())
)";

TEST_F(WorkerTest, AnAgentWorkspaceGoesFromABrokenBuildToASubmission) {
  auto row_sum = kernel_eval::LoadTask(kFixtures / "tasks" / "row_sum.py").value();
  auto client = Client({a_->address()});
  auto ws = client->OpenWorkspace(row_sum, {{"kernels/row_sum_binding.cpp", kRowSumBinding}});
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  auto& w = **ws;

  auto none = w.Run(kernel_eval::Stage::kCompile, "c0");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->verdict.outcome, Outcome::kCompileError);
  EXPECT_NE(none->text.find("no model_new.py"), std::string::npos) << none->text;

  ASSERT_TRUE(w.Write("model_new.py", kRowSumModel)->ok);
  ASSERT_TRUE(w.Write("kernels/row_sum.cpp", kRowSumKernel)->ok);
  auto listed = w.List().value();
  std::map<std::string, bool> seen;
  for (const auto& f : listed.files) seen[f.path] = f.read_only;
  EXPECT_TRUE(seen.at("model.py"));
  EXPECT_TRUE(seen.at("build/binding_registry.h"));
  EXPECT_FALSE(seen.at("kernels/row_sum.cpp"));
  EXPECT_NE(w.Read("model.py")->content.find("class Model"), std::string::npos);
  EXPECT_NE(w.Read("build/binding_registry.h")->content.find("REGISTER_BINDING"), std::string::npos);

  // What the agent gets wrong is an answer it can read, not a failed call.
  for (auto [path, why] : std::vector<std::pair<std::string, std::string>>{
           {"model.py", "read-only"}, {"build/ext_main.cpp", "read-only"}, {"../x.py", "not part of the candidate"},
           {"kernels/../../x.cu", "kernel files"}, {"kernels/a.sh", "end in"}}) {
    auto r = w.Write(path, "x");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->ok) << path;
    EXPECT_NE(r->message.find(why), std::string::npos) << path << ": " << r->message;
  }
  EXPECT_FALSE(w.Read("kernels/none.cu")->ok);
  EXPECT_FALSE(w.Write("kernels/huge.h", std::string(5 << 20, 'x'))->ok) << "over workspace_max_kb";

  auto broken = w.Run(kernel_eval::Stage::kCompile, "c1");
  ASSERT_TRUE(broken.ok()) << broken.status().ToString();
  EXPECT_EQ(broken->verdict.outcome, Outcome::kCompileError) << broken->text;
  EXPECT_NE(broken->text.find("MISSING_SEMICOLON"), std::string::npos) << broken->text;
  EXPECT_EQ(broken->verdict.reward, 0) << "tools earn no reward";

  auto twice = w.Edit("kernels/row_sum.cpp", "s", "t");
  EXPECT_FALSE(twice->ok);
  EXPECT_NE(twice->message.find("occurs"), std::string::npos) << twice->message;
  ASSERT_TRUE(w.Edit("kernels/row_sum.cpp", " MISSING_SEMICOLON", ";")->ok);

  auto compiled = w.Run(kernel_eval::Stage::kCompile, "c2");
  ASSERT_TRUE(compiled.ok());
  EXPECT_EQ(compiled->verdict.outcome, Outcome::kOk) << compiled->text;
  EXPECT_EQ(compiled->verdict.stage, "compile");
  auto verified = w.Run(kernel_eval::Stage::kVerify, "v1");
  ASSERT_TRUE(verified.ok());
  EXPECT_EQ(verified->verdict.outcome, Outcome::kOk) << verified->text;
  EXPECT_FALSE(verified->verdict.timed);
  EXPECT_NE(verified->text.find("check check_0: passed"), std::string::npos) << verified->text;

  auto submitted = w.Submit("s1");
  ASSERT_TRUE(submitted.ok());
  EXPECT_EQ(submitted->verdict.outcome, Outcome::kOk) << submitted->text;
  EXPECT_TRUE(submitted->verdict.timed);
  EXPECT_GE(submitted->verdict.reward, 1);
  EXPECT_NE(submitted->text.find("speedup"), std::string::npos) << submitted->text;
  auto again = w.Submit("s1");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_idempotency_cache);
  auto late = w.Write("model_new.py", "x = 1\n");
  EXPECT_FALSE(late->ok);
  EXPECT_NE(late->message.find("submitted"), std::string::npos);
  EXPECT_EQ(client->Info(a_->address())->workspaces, 1);
  ASSERT_TRUE(w.Close().ok());
  EXPECT_EQ(client->Info(a_->address())->workspaces, 0);
}

TEST_F(WorkerTest, AWorkspaceMovesWhenItsWorkerDiesOrReapsIt) {
  auto row_sum = kernel_eval::LoadTask(kFixtures / "tasks" / "row_sum.py").value();
  auto reaper = Serve("R", judge_, "", 16, [](config::WorkerConfig* wc) { wc->workspace_idle_s = 0.3; });
  auto client = Client({reaper->address()});
  auto ws = client->OpenWorkspace(row_sum, {{"model_new.py", kRowSumModel}});
  ASSERT_TRUE(ws.ok());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(client->Info(reaper->address())->workspaces, 0) << "an idle workspace was not reaped";
  auto read = (*ws)->Read("model_new.py");  // re-created from the client's mirror
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->content, kRowSumModel);
  EXPECT_EQ((*ws)->moves(), 1);

  // Its worker shut down: the workspace continues on the other one.
  auto both = Client({a_->address(), b_->address()});
  auto moving = both->OpenWorkspace(row_sum, {{"model_new.py", kRowSumModel}});
  ASSERT_TRUE(moving.ok());
  ASSERT_TRUE((*moving)->Write("kernels/row_sum_binding.cpp", kRowSumBinding)->ok);
  ASSERT_TRUE((*moving)->Write("kernels/row_sum.cpp", kRowSumKernel)->ok);
  ASSERT_TRUE((*moving)->Edit("kernels/row_sum.cpp", " MISSING_SEMICOLON", ";")->ok);
  std::string first = (*moving)->worker();
  (first == a_->address() ? a_ : b_)->Shutdown(0);
  auto verified = (*moving)->Run(kernel_eval::Stage::kVerify, "after-move");
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_EQ(verified->verdict.outcome, Outcome::kOk) << verified->text;
  EXPECT_NE((*moving)->worker(), first);
  EXPECT_EQ((*moving)->moves(), 1);
}

TEST_F(WorkerTest, NonLoopbackWithoutTokenIsRefused) {
  config::WorkerConfig wc;
  wc.listen = "0.0.0.0:0";
  auto s = WorkerServer::Start(wc, judge_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not a loopback address"), std::string::npos);
  wc.token = "t";  // a token alone is not enough: TLS too
  EXPECT_FALSE(WorkerServer::Start(wc, judge_).ok());
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:5"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:5"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:5"));
}

TEST_F(WorkerTest, PathEscapesAndOversizedRequestsAreRejected) {
  auto small = Serve("small", judge_, "", /*max_request_mb=*/1);
  auto stub = v1::Worker::NewStub(grpc::CreateChannel(small->address(), grpc::InsecureChannelCredentials()));
  for (std::string bad : {"../escape.py", "/etc/passwd", "kernels/../../x.cu", ""}) {
    v1::EvaluateRequest req;
    req.mutable_task()->set_name("relu");
    req.mutable_task()->set_source(task_.source);
    req.mutable_candidate()->set_format(v1::Candidate::WORKSPACE);
    auto* f = req.mutable_candidate()->add_files();
    f->set_path(bad);
    f->set_content("x");
    grpc::ClientContext ctx;
    v1::EvaluateResponse resp;
    grpc::Status s = stub->Evaluate(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(s.error_message().find("not a safe relative path"), std::string::npos) << s.error_message();
  }
  v1::EvaluateRequest big;
  big.mutable_task()->set_source(task_.source);
  auto* f = big.mutable_candidate()->add_files();
  f->set_path("model_new.py");
  f->set_content(std::string(3 << 20, '#'));
  grpc::ClientContext ctx;
  v1::EvaluateResponse resp;
  grpc::Status s = stub->Evaluate(&ctx, big, &resp);
  EXPECT_TRUE(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
              s.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
}

}  // namespace
}  // namespace cuda_agent::rpc
