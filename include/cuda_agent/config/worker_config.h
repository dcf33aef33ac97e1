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
