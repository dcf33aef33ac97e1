// How long the blocks of a persistent kernel, one per SM, take to read the
// same few hundred KB out of L2 at once, by plain loads and by bulk copies:
// what an attention that gave each of many blocks a key head's whole cached
// keys and values (96 KB at Qwen2.5-0.5B's shape and 384 keys, 160 KB at
// 640) would pay for that fan-out, against the merge of chunked partials it
// would replace (model/decode_layers.cu; README, session 30).
//
//   l2_fanout_bench [--iters N]
//
// For each size and number of blocks (block b reads copy b % 2 of the data:
// two key heads), every block takes its copy into shared memory; the times
// are each block's, from its start to its last byte landed (%globaltimer),
// over N launches after a warm-up launch that leaves the data in L2: the
// median block, the median of each launch's slowest block, and the median
// span of a launch (first start to last end). Then the same from DRAM, each
// block reading data of its own that no launch has read for a while (as the
// decode kernel's weights are), at the copies' size of a row of weights.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_check.h"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 8;                // 16-byte loads a thread has in flight
constexpr int kSharedBytes = 200 * 1024;  // also keeps every block on an SM of its own
constexpr int64_t kMaxBytes = 160 * 1024;

__device__ inline unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ inline uint32_t SharedAddress(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Block b copies `bytes` of copy b % 2 of `data` into shared memory: by
// plain 16-byte L2 loads (kBulk false), or by `copies` bulk copies of equal
// parts, lane l of warp 0 issuing parts l, l + 32, ..., completed on one
// transaction barrier. times: [start, end] a block.
template <bool kBulk>
__global__ void __launch_bounds__(kThreads, 1)
    FanOut(const uint4* data, int64_t bytes, int copies, int64_t stride, unsigned long long* times) {
  extern __shared__ __align__(128) uint4 shared[];
  __shared__ uint64_t landed;
  const uint4* src = data + (stride ? blockIdx.x * stride : blockIdx.x % 2 * kMaxBytes) / 16;
  const int n = static_cast<int>(bytes / 16);
  if (kBulk && threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SharedAddress(&landed)));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  const unsigned long long start = GlobalTimer();
  if constexpr (kBulk) {
    if (threadIdx.x < 32) {
      const int64_t share = bytes / copies;  // a multiple of 16
      if (threadIdx.x == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(&landed)),
                     "r"(static_cast<uint32_t>(bytes))
                     : "memory");
      __syncwarp();
      for (int c = threadIdx.x; c < copies; c += 32)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         SharedAddress(reinterpret_cast<char*>(shared) + c * share)),
                     "l"(reinterpret_cast<const char*>(src) + c * share), "r"(static_cast<uint32_t>(share)),
                     "r"(SharedAddress(&landed))
                     : "memory");
      uint32_t done = 0;
      while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(SharedAddress(&landed))
                     : "memory");
    }
  } else {
    for (int i0 = threadIdx.x; i0 < n; i0 += kThreads * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (i0 + u * kThreads < n) v[u] = __ldcg(src + i0 + u * kThreads);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (i0 + u * kThreads < n) shared[i0 + u * kThreads] = v[u];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    times[2 * blockIdx.x] = start;
    times[2 * blockIdx.x + 1] = GlobalTimer();
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = IterationsFlag(argc, argv, 50);
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaFuncSetAttribute(FanOut<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
  CHECK(cudaFuncSetAttribute(FanOut<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
  uint4* data = nullptr;
  unsigned long long* times = nullptr;
  const int64_t dram_bytes = int64_t{1} << 30;  // 20 times L2
  CHECK(cudaMalloc(&data, dram_bytes));
  CHECK(cudaMemset(data, 1, dram_bytes));
  CHECK(cudaMalloc(&times, 2 * sms * sizeof(unsigned long long)));
  std::vector<unsigned long long> host(2 * sms);
  std::printf("%d SMs, %d launches each; microseconds\n", sms, iters);
  std::printf("%6s %8s %7s %12s %12s %14s %10s\n", "from", "KB", "blocks", "copy", "median block", "slowest block",
              "span");
  // From DRAM: launch `it` reads the blocks' data at a region of its own,
  // round the buffer.
  auto dram_at = [&](int it, int blocks) {
    const int64_t region = blocks * kMaxBytes, regions = dram_bytes / region;
    return data + (it + 1) % regions * region / 16;
  };
  for (bool dram : {false, true})
    for (int64_t kb : {8, 32, 96, 160})
      for (int blocks : {1, 18, 66, sms})
        for (int copies : {0, 1, 4, 32, 128}) {                           // 0: plain loads
          if (dram && copies > 0 && kb * 1024 / copies < 1024) continue;  // rows of weights are 1-10 KB
          const bool bulk = copies > 0;
          auto kernel = bulk ? FanOut<true> : FanOut<false>;
          std::vector<double> each, slowest, span;
          for (int it = -1; it < iters; ++it) {  // -1: the warm-up
            kernel<<<blocks, kThreads, kSharedBytes>>>(dram ? dram_at(it, blocks) : data, kb * 1024, copies,
                                                       dram ? kMaxBytes : 0, times);
            CHECK(cudaGetLastError());
            CHECK(cudaMemcpy(host.data(), times, 2 * blocks * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
            if (it < 0) continue;
            unsigned long long first = ~0ull, last = 0;
            double worst = 0;
            for (int b = 0; b < blocks; ++b) {
              const double us = (host[2 * b + 1] - host[2 * b]) * 1e-3;
              each.push_back(us);
              worst = std::max(worst, us);
              first = std::min(first, host[2 * b]);
              last = std::max(last, host[2 * b + 1]);
            }
            slowest.push_back(worst);
            span.push_back((last - first) * 1e-3);
          }
          char how[32] = "loads";
          if (bulk) std::snprintf(how, sizeof(how), "%d bulk", copies);
          std::printf("%6s %8lld %7d %12s %12.3f %14.3f %10.3f\n", dram ? "DRAM" : "L2", static_cast<long long>(kb),
                      blocks, how, Median(each), Median(slowest), Median(span));
        }
  CHECK(cudaFree(data));
  CHECK(cudaFree(times));
  return 0;
}
