// How long the blocks of a persistent kernel take to wait for each other on
// this GPU, by the ways the persistent decode kernel (model/decode_layers.cu)
// uses or could use: a grid barrier (one counter, polled by each block's
// thread 0 with acquire loads, as the kernel's GridBarrier does, or with
// relaxed loads and one fence after), a flag passed between two blocks and
// back, and within thread-block clusters of 8 the hardware cluster barrier
// and an exchange through distributed shared memory whose completion each
// block's thread 0 signals on every block's mbarrier (which, unlike the
// cluster barrier, leaves a warp free to do other work, as the decode
// kernel's copying warp does). Also whether a launch may be cooperative and
// clustered at once, and how many clusters of 2, 4 and 8 blocks with the
// decode kernel's shared memory fit at a time.
//
//   sync_latency_bench [--iters N]
//
// Each figure is one launch of N rounds (after a warm-up launch), timed by
// CUDA events: microseconds per round.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cuda_check.h"

namespace {

constexpr int kThreads = 256;        // computing threads of a block
constexpr int kClusterBlocks = 8;    // the portable maximum
constexpr int kExchangeFloats = 64;  // each block's message to each block of its cluster

enum Poll { kAcquire = 0, kRelaxedThenFence = 1 };

// Rounds of a grid barrier over every block: arrive with a release, then
// thread 0 polls the count until every block has arrived this round.
template <int kPoll>
__global__ void GridBarrierKernel(unsigned* counter, int rounds) {
  for (int r = 1; r <= rounds; ++r) {
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
      const unsigned target = static_cast<unsigned>(r) * gridDim.x;
      unsigned seen = 0;
      do {
        if constexpr (kPoll == kAcquire)
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
        else
          asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      } while (seen < target);
      if constexpr (kPoll == kRelaxedThenFence) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
  }
}

// The first and the last block pass a flag back and forth (release store,
// acquire polls): a round is two one-way signals.
__global__ void PingPongKernel(unsigned* flag, int rounds) {
  const bool first = blockIdx.x == 0, last = blockIdx.x == gridDim.x - 1;
  if (threadIdx.x != 0 || !(first || last)) return;
  for (unsigned r = 1; r <= static_cast<unsigned>(rounds); ++r) {
    const unsigned wait_for = first ? 2 * r : 2 * r - 1, send = first ? 2 * r - 1 : 2 * r;
    if (first) asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(send) : "memory");
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
    } while (seen < wait_for);
    if (last) asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(send) : "memory");
  }
}

// Rounds of the hardware cluster barrier, every thread taking part.
__global__ void ClusterBarrierKernel(int rounds) {
  for (int r = 0; r < rounds; ++r)
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ inline uint32_t SharedAddress(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// The address of the same shared variable in block `rank` of the cluster.
__device__ inline uint32_t InBlock(uint32_t address, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  return remote;
}

// Rounds of an exchange within each cluster: every block's kThreads
// computing threads write kExchangeFloats floats into each block's inbox
// (two, alternating by round), then thread 0 arrives on each block's
// mbarrier (one arrival per block completes a phase) and the computing
// threads wait for their own block's phase; a ninth warp stays busy apart
// and takes no part in the rounds. `sums`: what each block read, so that
// nothing is optimised away.
__global__ void ClusterExchangeKernel(int rounds, float* sums) {
  __shared__ uint64_t arrived;
  __shared__ float inbox[2][kClusterBlocks][kExchangeFloats];
  __shared__ volatile int finished;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SharedAddress(&arrived)), "r"(kClusterBlocks)
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    finished = 0;
  }
  // Every block's barrier is set up before any block arrives on it.
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (threadIdx.x >= kThreads) {  // the warp apart: busy until the others finish
    while (!finished) __nanosleep(1000);
  } else {
    float total = 0;
    for (int r = 0; r < rounds; ++r) {
      const int buffer = r & 1;
      for (int i = threadIdx.x; i < kClusterBlocks * kExchangeFloats; i += kThreads) {
        const int to = i / kExchangeFloats, e = i % kExchangeFloats;
        const uint32_t where = InBlock(SharedAddress(&inbox[buffer][rank][e]), static_cast<uint32_t>(to));
        asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(where), "f"(static_cast<float>(r + e)) : "memory");
      }
      asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
      if (threadIdx.x == 0)
        for (uint32_t to = 0; to < kClusterBlocks; ++to)
          asm volatile(
              "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(InBlock(SharedAddress(&arrived), to))
              : "memory");
      asm volatile(
          "{\n"
          ".reg .pred done;\n"
          "WAIT:\n"
          "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
          "@!done bra WAIT;\n"
          "}" ::"r"(SharedAddress(&arrived)),
          "r"(static_cast<uint32_t>(r & 1))
          : "memory");
      total += inbox[buffer][threadIdx.x % kClusterBlocks][threadIdx.x % kExchangeFloats];
    }
    sums[blockIdx.x * kThreads + threadIdx.x] = total;
    if (threadIdx.x == 0) finished = 1;
  }
  // Every thread of the cluster, the warp apart too: no block leaves while
  // another may still write into its shared memory.
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

cudaLaunchConfig_t Config(int blocks, int threads, int cluster, bool cooperative, cudaLaunchAttribute* attributes) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  int n = 0;
  if (cluster > 1) {
    attributes[n].id = cudaLaunchAttributeClusterDimension;
    attributes[n].val.clusterDim.x = static_cast<unsigned>(cluster);
    attributes[n].val.clusterDim.y = attributes[n].val.clusterDim.z = 1;
    ++n;
  }
  if (cooperative) {
    attributes[n].id = cudaLaunchAttributeCooperative;
    attributes[n].val.cooperative = 1;
    ++n;
  }
  config.attrs = attributes;
  config.numAttrs = static_cast<unsigned>(n);
  return config;
}

// Microseconds per round of `launch(rounds)`, after a warm-up launch.
template <typename Launch>
double MicrosPerRound(int rounds, Launch&& launch) {
  CHECK(launch(10));
  CHECK(cudaDeviceSynchronize());
  return EventMillis([&] { CHECK(launch(rounds)); }) * 1e3 / rounds;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = IterationsFlag(argc, argv, 10000);
  int device = 0, sms = 0, optin = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("%s, %d SMs, %d rounds a launch\n", prop.name, sms, rounds);
  unsigned* counters = nullptr;
  float* sums = nullptr;
  CHECK(cudaMalloc(&counters, 2 * sizeof(unsigned)));
  CHECK(cudaMalloc(&sums, sms * (kThreads + 32) * sizeof(float)));
  cudaLaunchAttribute attributes[2];

  auto grid_barrier = [&](auto kernel, const char* what, int blocks, int cluster, bool cooperative) {
    const double us = MicrosPerRound(rounds, [&](int n) {
      CHECK(cudaMemset(counters, 0, sizeof(unsigned)));
      cudaLaunchConfig_t config = Config(blocks, kThreads, cluster, cooperative, attributes);
      return cudaLaunchKernelEx(&config, kernel, counters, n);
    });
    std::printf("  %-44s %4d blocks  %6.3f us a round\n", what, blocks, us);
  };
  std::printf("grid barrier, thread 0 of each block polls one counter:\n");
  grid_barrier(GridBarrierKernel<kAcquire>, "acquire polls (the decode kernel's)", sms, 1, true);
  grid_barrier(GridBarrierKernel<kRelaxedThenFence>, "relaxed polls, one acquire fence after", sms, 1, true);
  const double ping = MicrosPerRound(rounds, [&](int n) {
    CHECK(cudaMemset(counters + 1, 0, sizeof(unsigned)));
    PingPongKernel<<<sms, 32>>>(counters + 1, n);
    return cudaGetLastError();
  });
  std::printf("flag between the first and the last block:   %6.3f us one way\n", ping / 2);

  // Clusters: how many fit with the decode kernel's shared memory, whether a
  // launch may also be cooperative, and what syncs within them cost.
  const int block_threads = kThreads + 32;
  CHECK(cudaFuncSetAttribute(ClusterBarrierKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  for (int cluster : {2, 4, 8}) {
    int fit = 0;
    cudaLaunchConfig_t config = Config(sms / cluster * cluster, block_threads, cluster, false, attributes);
    config.dynamicSmemBytes = static_cast<size_t>(optin);
    CHECK(cudaOccupancyMaxActiveClusters(&fit, ClusterBarrierKernel, &config));
    std::printf("clusters of %d blocks with %d KB of shared memory each at a time: %d (%d blocks)\n", cluster,
                optin / 1024, fit, fit * cluster);
  }
  const int blocks = sms / kClusterBlocks * kClusterBlocks;
  {
    CHECK(cudaMemset(counters, 0, sizeof(unsigned)));
    cudaLaunchConfig_t config = Config(blocks, kThreads, kClusterBlocks, true, attributes);
    const cudaError_t e = cudaLaunchKernelEx(&config, GridBarrierKernel<kAcquire>, counters, 1);
    const cudaError_t sync = cudaDeviceSynchronize();
    std::printf("a launch both cooperative and in clusters of %d: %s\n", kClusterBlocks,
                e == cudaSuccess && sync == cudaSuccess ? "runs" : cudaGetErrorString(e != cudaSuccess ? e : sync));
    cudaGetLastError();
  }
  grid_barrier(GridBarrierKernel<kAcquire>, "grid barrier, acquire polls, clusters of 8", blocks, kClusterBlocks,
               false);
  const double cluster_barrier = MicrosPerRound(rounds, [&](int n) {
    cudaLaunchConfig_t config = Config(blocks, kThreads, kClusterBlocks, false, attributes);
    return cudaLaunchKernelEx(&config, ClusterBarrierKernel, n);
  });
  std::printf("  %-44s %4d blocks  %6.3f us a round\n", "cluster barrier (barrier.cluster), clusters of 8", blocks,
              cluster_barrier);
  const double exchange = MicrosPerRound(rounds, [&](int n) {
    cudaLaunchConfig_t config = Config(blocks, block_threads, kClusterBlocks, false, attributes);
    return cudaLaunchKernelEx(&config, ClusterExchangeKernel, n, sums);
  });
  std::printf("  %-44s %4d blocks  %6.3f us a round\n", "256 B to each block of 8 + mbarrier arrivals", blocks,
              exchange);
  CHECK(cudaFree(counters));
  CHECK(cudaFree(sums));
  return 0;
}
