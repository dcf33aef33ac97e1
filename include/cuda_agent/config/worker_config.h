// Options of `cuda-agent worker` and of the client that talks to workers (rpc component).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_agent/config/fields.h"

namespace cuda_agent::config {

struct WorkerConfig {
  std::string listen = "127.0.0.1:50051";
  std::string name;
  int64_t max_concurrent = 2;
  int64_t max_queue = 256;
  int64_t max_request_mb = 16;
  int64_t idempotency_entries = 4096;
  std::string token;
  std::string tls_cert_path;
  std::string tls_key_path;
  std::string tls_client_ca_path;
  bool allow_insecure_remote = false;
  std::vector<int64_t> devices;
  std::string workspace_dir;
  int64_t max_workspaces = 1024;
  int64_t workspace_max_files = 64;
  int64_t workspace_max_kb = 4096;
  double workspace_idle_s = 1800;
  double workspace_max_s = 6 * 3600;
  int64_t health_probe_every = 0;
  double quarantine_recheck_s = 60;
  int64_t gpu_memory_slack_mb = 2048;
  int64_t min_free_memory_mb = 0;

  template <class V>
  void Visit(V& v) {
    v("listen", listen, "address:port to serve on; port 0 picks a free one. Non-loopback addresses need a token");
    v("name", name, "name reported in responses; empty: host:port");
    v("max_concurrent", max_concurrent, "evaluations run at once (compiles overlap; timing is one at a time)",
      Range{1, 1024});
    v("max_queue", max_queue, "evaluations waiting beyond max_concurrent before requests are refused",
      Range{0, 1 << 20});
    v("max_request_mb", max_request_mb, "largest request accepted, MiB", Range{1, 1024});
    v("idempotency_entries", idempotency_entries, "finished results remembered for retried requests",
      Range{0, 1 << 24});
    v("token", token, "bearer token clients must send (authorization: Bearer ...); empty: none");
    v("tls_cert_path", tls_cert_path, "PEM certificate chain of this worker; with tls_key_path, serve TLS only");
    v("tls_key_path", tls_key_path, "PEM private key of tls_cert_path");
    v("tls_client_ca_path", tls_client_ca_path,
      "PEM CA that client certificates must chain to (mutual TLS); empty: no client certificates");
    v("allow_insecure_remote", allow_insecure_remote,
      "serve a non-loopback address without TLS and a token (never on a shared network)");
    v("devices", devices,
      "GPU indices served, one judge and timing slot each (empty: judge.device); compiles share max_concurrent");
    v("workspace_dir", workspace_dir, "where agent workspaces live; empty: <tmp>/cuda-agent-workspaces-<uid>");
    v("max_workspaces", max_workspaces, "agent workspaces open at once on this worker", Range{1, 1 << 20});
    v("workspace_max_files", workspace_max_files, "candidate files in one workspace", Range{1, 256});
    v("workspace_max_kb", workspace_max_kb, "candidate bytes in one workspace, KiB", Range{1, 16384});
    v("workspace_idle_s", workspace_idle_s, "a workspace untouched this long is closed", Range{0.1, 1e7});
    v("workspace_max_s", workspace_max_s, "a workspace older than this is closed", Range{1, 1e8});
    v("health_probe_every", health_probe_every,
      "probe the device after every N evaluations (0: only after a crash or timeout of a candidate)",
      Range{0, 1 << 30});
    v("quarantine_recheck_s", quarantine_recheck_s, "how often a quarantined device is probed again, seconds",
      Range{0.1, 86400});
    v("gpu_memory_slack_mb", gpu_memory_slack_mb,
      "quarantine the GPU when its free memory is this far below what it was at start", Range{0, 1 << 30});
    v("min_free_memory_mb", min_free_memory_mb, "quarantine the device when less memory than this is free",
      Range{0, 1LL << 40});
  }
};

struct ClientConfig {
  std::vector<std::string> endpoints{"127.0.0.1:50051"};
  double deadline_s = 1800;
  int64_t max_attempts = 3;
  std::string token;
  std::string tls_ca_path;
  std::string tls_cert_path;
  std::string tls_key_path;

  template <class V>
  void Visit(V& v) {
    v("endpoints", endpoints, "workers to use, host:port each; requests go to the least loaded healthy one");
    v("deadline_s", deadline_s, "deadline of one evaluation across all its attempts, seconds", Range{1, 86400});
    v("max_attempts", max_attempts, "attempts per evaluation on infrastructure failure, each on another worker",
      Range{1, 100});
    v("token", token, "bearer token sent to workers");
    v("tls_ca_path", tls_ca_path, "PEM CA that workers' certificates must chain to; set: connect with TLS");
    v("tls_cert_path", tls_cert_path, "PEM client certificate for workers that require mutual TLS");
    v("tls_key_path", tls_key_path, "PEM private key of tls_cert_path");
  }
};

}  // namespace cuda_agent::config
