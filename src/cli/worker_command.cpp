// `cuda-agent worker --config configs/worker.yaml`: serve the judge over gRPC
// until SIGINT/SIGTERM, then drain (running evaluations get 30 s to finish).
#include <signal.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "cuda_agent/config/config.h"
#include "cuda_agent/kernel_eval/judge.h"
#include "cuda_agent/rpc/worker_server.h"
#include "cuda_agent/util/log.h"

namespace cuda_agent::cli {

std::function<int()> AddWorkerCommand(CLI::App* app) {
  auto opts = std::make_shared<ConfigOptions>();
  CLI::App* cmd = app->add_subcommand("worker", "serve sandboxed kernel evaluation over gRPC");
  AddConfigOptions(cmd, opts.get());
  return [opts]() -> int {
    config::Config config;
    if (auto done = LoadCommandConfig(*opts, {}, &config)) return *done;
    // Block the stop signals before any thread starts; one thread waits for them.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    std::vector<int64_t> devices = config.worker.devices;
    if (devices.empty()) devices.push_back(config.judge.device);
    std::vector<std::shared_ptr<kernel_eval::Judge>> judges;
    for (int64_t device : devices) {  // one judge, and one timing slot, per GPU
      config::JudgeConfig jc = config.judge;
      jc.device = device;
      auto judge = kernel_eval::Judge::Create(jc, config.sandbox);
      if (!judge.ok()) return Fail(judge.status());
      judges.push_back(std::shared_ptr<kernel_eval::Judge>(std::move(*judge)));
    }
    auto server = rpc::WorkerServer::Start(config.worker, std::move(judges));
    if (!server.ok()) return Fail(server.status());
    std::cout << "serving on " << (*server)->address() << std::endl;
    int sig = 0;
    sigwait(&stop, &sig);
    CA_LOG(kInfo) << "signal " << sig << ": draining";
    (*server)->Shutdown(30);
    (*server)->Wait();
    return 0;
  };
}

}  // namespace cuda_agent::cli
