// How much code a kernel's loop can run through before fetching its
// instructions costs time, on this GPU: the persistent decode kernel
// (model/decode_layers.cu) runs through most of its ~8k instructions once a
// layer, and compiling out instructions it only skipped made it faster.
//
//   icache_bench [--reps N]
//
// Each kernel runs a loop whose body is `chunks` pieces of 64 integer
// multiply-adds (1 KB of code each; distinct immediates, so no two pieces
// are the same code and none can be merged), with as many blocks as SMs and
// 9 warps a block, the decode kernel's shape. "in order" runs the pieces one
// after the other (straight-line code, which fetching can stream); "shuffled"
// jumps to them in an order read from memory (a tree of branches picks each),
// the way a kernel's stages and calls jump across its code. Printed: the
// loop's code in KB, and nanoseconds a warp spends per instruction of the
// pieces; the knee where that rises is where the code no longer fits a
// level of the instruction caches. On an H200 (session 21): in order 3.03
// ns up to 32 KB, 4.2 at 48-96 KB, 3.0-3.8 past; shuffled 3.5-3.8 ns up to
// 32 KB, 4.7-5.3 at 48-128 KB, 7.2 at 192 KB and 8.4 at 256 KB.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "cuda_check.h"

namespace {

constexpr int kPieceOps = 64;  // multiply-adds of a piece

// x = x * a + kImm.
template <int kImm>
__device__ __forceinline__ void Mad(unsigned& x, unsigned a) {
  asm volatile("mad.lo.u32 %0, %0, %1, %2;" : "+r"(x) : "r"(a), "n"(kImm));
}

// Piece `kId`: 64 multiply-adds, 8 rounds over 8 accumulators, whose
// immediates no other piece has.
template <int kId, int... kOps>
__device__ __forceinline__ void PieceOps(unsigned (&x)[8], unsigned a, std::integer_sequence<int, kOps...>) {
  (Mad<kId * kPieceOps + kOps + 1>(x[kOps % 8], a), ...);
}
template <int kId>
__device__ __forceinline__ void Piece(unsigned (&x)[8], unsigned a) {
  PieceOps<kId>(x, a, std::make_integer_sequence<int, kPieceOps>());
}

// Pieces [kLo, kHi) one after the other.
template <int kLo, int kHi>
__device__ __forceinline__ void InOrder(unsigned (&x)[8], unsigned a) {
  if constexpr (kHi - kLo == 1) {
    Piece<kLo>(x, a);
  } else {
    InOrder<kLo, (kLo + kHi) / 2>(x, a);
    InOrder<(kLo + kHi) / 2, kHi>(x, a);
  }
}

// Piece `which` of [kLo, kHi), found by a tree of branches.
template <int kLo, int kHi>
__device__ __forceinline__ void Pick(int which, unsigned (&x)[8], unsigned a) {
  if constexpr (kHi - kLo == 1) {
    Piece<kLo>(x, a);
  } else if (which < (kLo + kHi) / 2) {
    Pick<kLo, (kLo + kHi) / 2>(which, x, a);
  } else {
    Pick<(kLo + kHi) / 2, kHi>(which, x, a);
  }
}

template <int kChunks, bool kShuffled>
__global__ void __launch_bounds__(288, 1) Loop(int step, int reps, unsigned a, unsigned* out) {
  unsigned x[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = threadIdx.x + i;
  __shared__ int picks[kChunks];
  // Piece (c * step + 1) % kChunks at turn c: every piece once for an odd
  // step, in an order the compiler does not know.
  for (int i = threadIdx.x; i < kChunks; i += blockDim.x) picks[i] = (i * step + 1) % kChunks;
  __syncthreads();
  for (int r = 0; r < reps; ++r) {
    if constexpr (kShuffled) {
#pragma unroll 1
      for (int c = 0; c < kChunks; ++c) Pick<0, kChunks>(picks[c], x, a);
    } else {
      InOrder<0, kChunks>(x, a);
    }
  }
  unsigned sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += x[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

template <int kChunks, bool kShuffled>
void Time(int sms, int reps, unsigned* out) {
  Loop<kChunks, kShuffled><<<sms, 288>>>(37, 1, 3, out);  // warm-up
  const float ms = EventMillis([&] {
    Loop<kChunks, kShuffled><<<sms, 288>>>(37, reps, 3, out);
    CHECK(cudaGetLastError());
  });
  // Per warp-instruction of the pieces: 9 warps share an SM's 4 schedulers.
  const double ns = ms * 1e6 / (static_cast<double>(reps) * kChunks * kPieceOps);
  std::printf("%-9s %4d KB of pieces  %7.3f ns per piece instruction (all 9 warps)\n",
              kShuffled ? "shuffled" : "in order", kChunks * kPieceOps * 16 / 1024, ns);
}

template <int... kChunks>
void TimeAll(int sms, int reps, unsigned* out) {
  (Time<kChunks, false>(sms, reps * 256 / kChunks, out), ...);
  (Time<kChunks, true>(sms, reps * 256 / kChunks, out), ...);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 2000;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  unsigned* d_out = nullptr;
  CHECK(cudaMalloc(&d_out, static_cast<size_t>(sms) * 288 * sizeof(unsigned)));
  std::printf("%d SMs, %d reps of 256 pieces' worth each\n", sms, reps);
  TimeAll<8, 16, 24, 32, 48, 64, 96, 128, 192, 256>(sms, reps, d_out);
  CHECK(cudaDeviceSynchronize());
  return 0;
}
