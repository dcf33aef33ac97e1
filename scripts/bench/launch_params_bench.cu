// What a kernel launch costs on this GPU by the size of its parameters, as
// the persistent decode kernel (model/decode_layers.cu) is launched: each
// decode step passes it ~30 KB of parameters (DecodeLayersArgs, with 64
// layers' descriptors, and FoldMaps' 128 tensor maps), cooperatively, with
// most of each SM's shared memory, one block per SM. Kernels that only read
// their parameters' first and last bytes, launched back to back on one
// stream: the time per launch is the gap a step pays before such a kernel
// runs, for 256 bytes of parameters and for 30 KB, plain and cooperative.
//
//   launch_params_bench [--iters N]
#include <cuda_runtime.h>

#include <cstdio>

#include "cuda_check.h"

namespace {

constexpr int kThreads = 288;                  // the decode kernel's: 8 computing warps and a copying one
constexpr size_t kShared = 200 * 1024;         // dynamic shared memory a block, as the decode kernel's ring
template <size_t N>
struct Params {
  unsigned char bytes[N];
};

template <typename P>
__global__ void Touch(const __grid_constant__ P p, int* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *out = p.bytes[0] + p.bytes[sizeof(p.bytes) - 1];
}

// Microseconds per launch of `iters` launches after a warm-up.
template <typename P>
double PerLaunch(int iters, bool cooperative, int blocks, int* out) {
  static P params{};  // zeros: only the size matters
  const auto kernel = Touch<P>;
  if (cooperative)
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kShared)));
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeCooperative;
  attribute[0].val.cooperative = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = cooperative ? kShared : 0;
  config.attrs = attribute;
  config.numAttrs = cooperative ? 1 : 0;
  auto launch = [&] { CHECK(cudaLaunchKernelEx(&config, kernel, params, out)); };
  for (int i = 0; i < 10; ++i) launch();
  return 1000.0 * EventMillis([&] {
           for (int i = 0; i < iters; ++i) launch();
         }) /
         iters;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = IterationsFlag(argc, argv, 2000);
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  int* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(int)));
  using Small = Params<256>;
  using Big = Params<30 * 1024>;
  for (bool cooperative : {false, true}) {
    const char* how = cooperative ? "cooperative, 200 KB shared a block" : "plain";
    std::printf("%-36s %5d blocks: 256 B of parameters %6.2f us a launch, 30 KB %6.2f us\n", how, sms,
                PerLaunch<Small>(iters, cooperative, sms, out), PerLaunch<Big>(iters, cooperative, sms, out));
  }
  CHECK(cudaFree(out));
  return 0;
}
