// The all-reduce the persistent decode kernel (model/decode_layers.cu) ends
// each layer with, by the layout of its fp32 sums: every block adds its
// partial sums of the whole residual stream (Qwen2.5-0.5B's 896 elements)
// into them by vector reductions (red.global.add.v4.f32, one a thread, as
// FoldDown's AddStaged), arrives on a grid barrier (a release), and once all
// have, reads the sums back through L2 (as the next layer's LoadInput). A
// round is that, timed over many rounds of one launch; the sums' groups of
// four elements are 16 (the kernel's layout), 32 or 128 bytes apart: L2
// takes the reductions into one line one after another, and dense, 896 sums
// are 28 lines, each with 8 reductions from every block.
//
//   reduce_spread_bench [--iters N]
#include <cuda_runtime.h>

#include <cstdio>

#include "cuda_check.h"

namespace {

constexpr int kThreads = 256;
constexpr int kElements = 896;  // Qwen2.5-0.5B's hidden size
constexpr int kGroups = kElements / 4;

template <int kStride>
__global__ void AllReduceKernel(float* sums, unsigned* counter, float* out, int rounds) {
  float seen = 0;
  for (int r = 1; r <= rounds; ++r) {
    float* s = sums + (r & 1) * kGroups * kStride;  // two copies, as the kernel's
    if (threadIdx.x < kGroups) {
      const float v = static_cast<float>(blockIdx.x + threadIdx.x);
      asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(s + threadIdx.x * kStride),
                   "f"(v), "f"(v), "f"(v), "f"(v)
                   : "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
      const unsigned target = static_cast<unsigned>(r) * gridDim.x;
      unsigned count = 0;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(count) : "l"(counter) : "memory");
      } while (count < target);
    }
    __syncthreads();
    if (threadIdx.x < kGroups) {
      const float4 f = __ldcg(reinterpret_cast<const float4*>(s + threadIdx.x * kStride));
      seen += f.x + f.w;
    }
  }
  if (seen == -1.f) *out = seen;  // never: keeps the loads
}

template <int kStride>
double PerRound(int iters, int blocks, float* sums, unsigned* counter, float* out) {
  int rounds = iters;
  void* args[] = {&sums, &counter, &out, &rounds};
  auto run = [&] {  // the count starts at zero: the kernel's targets are rounds * blocks
    CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(AllReduceKernel<kStride>), dim3(blocks),
                                      dim3(kThreads), args, 0, nullptr));
  };
  CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
  run();  // warm-up
  CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
  CHECK(cudaDeviceSynchronize());
  return 1000.0 * EventMillis(run) / rounds;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = IterationsFlag(argc, argv, 2000);
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  float *sums = nullptr, *out = nullptr;
  unsigned* counter = nullptr;
  CHECK(cudaMalloc(&sums, 2 * kGroups * 32 * sizeof(float)));
  CHECK(cudaMemset(sums, 0, 2 * kGroups * 32 * sizeof(float)));
  CHECK(cudaMalloc(&out, sizeof(float)));
  CHECK(cudaMalloc(&counter, sizeof(unsigned)));
  std::printf("%d blocks adding %d sums each, then a grid barrier, then reading them back (us a round):\n", sms,
              kElements);
  std::printf("  groups of 4 sums 16 bytes apart (dense)  %6.3f\n", PerRound<4>(iters, sms, sums, counter, out));
  std::printf("  groups of 4 sums 32 bytes apart          %6.3f\n", PerRound<8>(iters, sms, sums, counter, out));
  std::printf("  groups of 4 sums 128 bytes apart         %6.3f\n", PerRound<32>(iters, sms, sums, counter, out));
  CHECK(cudaFree(sums));
  CHECK(cudaFree(out));
  CHECK(cudaFree(counter));
  return 0;
}
