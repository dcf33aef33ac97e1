// What the CUDA-only benchmarks (sync_latency_bench, l2_fanout_bench,
// icache_bench, launch_params_bench, reduce_spread_bench) share:
// CHECK(call), with which a failed CUDA runtime call prints where and why,
// and exits; IterationsFlag, their one flag; EventMillis, their clock.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    const cudaError_t e = (call);                                                                \
    if (e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// The command line's `--iters N` (N >= 1), or `fallback` without it; any
// other argument, or a bad N, prints the usage and exits with 2.
inline int IterationsFlag(int argc, char** argv, int fallback) {
  int iters = fallback;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc && (iters = std::atoi(argv[++i])) >= 1) continue;
    std::fprintf(stderr, "usage: %s [--iters N], N at least 1\n", argv[0]);
    std::exit(2);
  }
  return iters;
}

// Milliseconds the GPU takes for what work() queues on the default stream,
// between two CUDA events.
template <typename Work>
float EventMillis(Work&& work) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start));
  work();
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return ms;
}
