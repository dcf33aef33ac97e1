// Launchers of the fused CUDA kernels behind model/fused_ops.h. Plain pointers
// and sizes, no torch: fused_kernels.cu compiles with nvcc alone. Every
// launcher runs on `stream` and returns the launch's cudaError_t as an int.
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace cuda_agent::model::kernels {

enum class Dtype { kFloat, kBFloat16, kHalf };

// Per row of logits [rows, vocab] (contiguous): logp = log softmax(z)[target],
// entropy = -sum p log p, and for the backward stats [rows, 2] = (max z,
// log sum e^(z - max)), all fp32.
int TokenLogprobsForward(Dtype dtype, const void* logits, int64_t rows, int64_t vocab, const int64_t* targets,
                         float* logp, float* entropy, float* stats, cudaStream_t stream);
// grad_logits = grad_logp * (onehot(target) - p) - grad_entropy * p * (log p + entropy);
// either gradient may be null (zero).
int TokenLogprobsBackward(Dtype dtype, const void* logits, int64_t rows, int64_t vocab, const int64_t* targets,
                          const float* grad_logp, const float* grad_entropy, const float* stats,
                          const float* entropy, void* grad_logits, cudaStream_t stream);

// Rotary embedding of x [rows, heads, dim] with tables cos, sin [rows, dim]
// (all contiguous, one dtype): out = x * cos + rotate_half(x) * sin, or with
// `transpose` its adjoint (the gradient of x given the gradient of out).
int Rotary(Dtype dtype, const void* x, const void* cos, const void* sin, int64_t rows, int64_t heads, int64_t dim,
           bool transpose, void* out, cudaStream_t stream);

// SwiGLU: out = silu(gate) * up over n elements (contiguous, one dtype).
int SwiGluForward(Dtype dtype, const void* gate, const void* up, int64_t n, void* out, cudaStream_t stream);
// grad_gate and grad_up from grad_out.
int SwiGluBackward(Dtype dtype, const void* gate, const void* up, const void* grad_out, int64_t n, void* grad_gate,
                   void* grad_up, cudaStream_t stream);

// A token per row of logits [rows, vocab] (contiguous, rows <= 65535): with
// temperature t = temperature[row] (uniform_temperature where temperature is
// null) 0, the argmax (the first of ties) and its log softmax(z); with t > 0,
// a draw from softmax(z / t) and its log-probability under it, the noise
// from (seed, offset) (SampleTokens in sample_kernels.cu). out [2, rows]
// fp32: the token ids, then the logprobs; host_out, where set, pinned host
// memory written through its device mapping, the same (no copy after it;
// cudaErrorInvalidValue where it has none). `work`: SampleTokensWorkFloats
// floats; `counters`: rows int32 zeros, left zero.
int64_t SampleTokensSplits(int64_t rows, int64_t vocab);
inline int64_t SampleTokensWorkFloats(int64_t rows, int64_t vocab) {
  return rows * SampleTokensSplits(rows, vocab) * 5;
}
int SampleTokens(Dtype dtype, const void* logits, int64_t rows, int64_t vocab, const float* temperature,
                 float uniform_temperature, uint64_t seed, uint64_t offset, float* work, int* counters, float* out,
                 float* host_out, cudaStream_t stream);
// The first `rows` columns of staging [5, stride] (pinned host int64, read
// through its device mapping) into inputs [5, stride] (device), then
// inputs[0][inputs[2][i]] = picks[inputs[3][i]] (a token id held as a
// float) for i < fed. One block. cudaErrorInvalidValue where staging has no
// device mapping.
int StageDecodeInputs(const int64_t* staging, int64_t rows, int64_t stride, const float* picks, int64_t fed,
                      int64_t* inputs, cudaStream_t stream);
// dst[i] = src[i] for i < n, dst pinned host memory written through its
// device mapping (cudaErrorInvalidValue where it has none).
int CopyToPinned(const float* src, float* dst, int64_t n, cudaStream_t stream);

}  // namespace cuda_agent::model::kernels
