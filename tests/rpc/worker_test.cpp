// The Worker service over loopback with the real judge (cpu backend).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
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
                                    const std::string& token = "", int64_t max_request_mb = 16) {
  config::WorkerConfig wc;
  wc.listen = "127.0.0.1:0";
  wc.name = name;
  wc.max_concurrent = 2;
  wc.token = token;
  wc.max_request_mb = max_request_mb;
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
  std::string work = "/tmp/cancel-test-" + std::to_string(::getpid());
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

// A CA and a certificate for 127.0.0.1 signed by it, made with the openssl CLI.
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
        "-out srv.pem 2>/dev/null";
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
