// Options of the kernel judge (kernel_eval component): how candidates are
// compiled, checked, timed and rewarded (DESIGN.md §4, §5).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_agent/config/fields.h"

namespace cuda_agent::config {

struct JudgeConfig {
  std::string backend = "auto";
  int64_t device = 0;
  int64_t num_checks = 5;
  bool hidden_variants = true;
  double atol = 1e-2;
  double rtol = 1e-2;
  std::string nan_policy = "match";
  int64_t seed = 0;
  int64_t warmup_trials = 3;
  int64_t timed_trials = 30;
  int64_t input_pool = 2;
  bool flush_cache = true;
  int64_t flush_bytes = 0;
  bool tf32 = false;
  int64_t cpu_threads = 1;
  double compile_timeout_s = 300;
  double run_timeout_s = 600;
  std::string cuda_arch;
  std::vector<std::string> nvcc_flags{"-O3", "--use_fast_math"};
  std::vector<std::string> cxx_flags{"-O3"};
  std::vector<std::string> link_libraries{"cublas", "cudnn"};
  std::vector<std::string> allowed_torch_ops{"aten::empty.memory_format",
                                             "aten::empty_strided",
                                             "aten::empty_like",
                                             "aten::zeros",
                                             "aten::zeros_like",
                                             "aten::ones",
                                             "aten::ones_like",
                                             "aten::full",
                                             "aten::new_empty",
                                             "aten::new_empty_strided",
                                             "aten::new_zeros",
                                             "aten::new_ones",
                                             "aten::view",
                                             "aten::_unsafe_view",
                                             "aten::reshape",
                                             "aten::expand",
                                             "aten::permute",
                                             "aten::transpose.int",
                                             "aten::t",
                                             "aten::squeeze.dim",
                                             "aten::squeeze.dims",
                                             "aten::squeeze",
                                             "aten::unsqueeze",
                                             "aten::flatten.using_ints",
                                             "aten::slice.Tensor",
                                             "aten::select.int",
                                             "aten::as_strided",
                                             "aten::alias",
                                             "aten::detach",
                                             "aten::contiguous",
                                             "aten::clone",
                                             "aten::copy_",
                                             "aten::_to_copy",
                                             "aten::to.dtype",
                                             "aten::split.Tensor",
                                             "aten::chunk",
                                             "aten::unbind.int",
                                             "aten::lift_fresh",
                                             "aten::zero_",
                                             "aten::fill_.Scalar",
                                             "aten::resize_",
                                             "aten::is_contiguous",
                                             "aten::size",
                                             "aten::stride",
                                             "aten::sym_size.int",
                                             "aten::sym_stride.int",
                                             "aten::sym_numel",
                                             "aten::_local_scalar_dense",
                                             "aten::item"};
  bool static_checks = true;
  double speed_margin = 0.05;
  std::string reward = "milestone";
  double timing_mismatch_factor = 2.0;
  double mem_bandwidth_gbs = 0;
  double peak_tflops = 0;
  std::string work_dir;
  std::string cache_dir;
  bool keep_work_dir = false;
  int64_t log_bytes = 16384;
  std::string python = "python3";
  std::string harness_dir;

  template <class V>
  void Visit(V& v) {
    v("backend", backend, "cuda (nvcc, CUDA events), cpu (g++, wall clock) or auto (cuda if a GPU is visible)",
      OneOf{{"auto", "cuda", "cpu"}});
    v("device", device, "GPU index used for verification and timing (cuda backend)", Range{0, 1023});
    v("num_checks", num_checks, "correctness checks on fresh random inputs", Range{1, 1000});
    v("hidden_variants", hidden_variants, "also check inputs scaled x3, x0.01 and negated (KernelBench-Verified)");
    v("atol", atol, "absolute tolerance of the output check", Range{0, 1e6});
    v("rtol", rtol, "relative tolerance of the output check", Range{0, 1e6});
    v("nan_policy", nan_policy,
      "match: NaN/Inf must appear exactly where the reference has them; forbid: any NaN/Inf fails",
      OneOf{{"match", "forbid"}});
    v("seed", seed, "seed of inputs and weights; 0 draws a fresh one per evaluation", Range{0, 9.0e15});
    v("warmup_trials", warmup_trials, "untimed calls before timing", Range{0, 100000});
    v("timed_trials", timed_trials, "timed calls per implementation (eager, torch.compile, candidate)",
      Range{3, 100000});
    v("input_pool", input_pool,
      "distinct random input sets the timed calls rotate through (each call also "
      "gets its own scale, so no two timed calls see the same input)",
      Range{2, 64});
    v("flush_cache", flush_cache, "flush the L2 (cuda) or last-level cache (cpu) before every timed call");
    v("flush_bytes", flush_bytes, "bytes written to flush caches; 0 picks twice the cache size", Range{0, 1e12});
    v("tf32", tf32, "allow TF32 matmuls/convolutions in the eager and torch.compile baselines");
    v("cpu_threads", cpu_threads, "torch intra-op threads for all implementations on the cpu backend", Range{1, 1024});
    v("compile_timeout_s", compile_timeout_s, "wall-clock limit of one candidate build, seconds", Range{1, 86400});
    v("run_timeout_s", run_timeout_s, "wall-clock limit of one verify+profile run, seconds", Range{1, 86400});
    v("cuda_arch", cuda_arch, "nvcc target such as sm_90; empty detects the GPU's");
    v("nvcc_flags", nvcc_flags, "nvcc optimisation flags for candidate .cu files (recorded in the verdict)");
    v("cxx_flags", cxx_flags, "g++ optimisation flags for candidate .cpp files (recorded in the verdict)");
    v("link_libraries", link_libraries,
      "libraries a cuda-backend candidate links and may call from its own C++ (default: cuBLAS, cuDNN)");
    v("allowed_torch_ops", allowed_torch_ops,
      "ATen ops ModelNew.forward may dispatch (allocation, views, copies); anything else is FORBIDDEN");
    v("static_checks", static_checks,
      "lint candidate sources before building (forbidden imports, calls, introspection); turning this off "
      "leaves only the run-time checks and the sandbox, and is recorded in the verdict");
    v("speed_margin", speed_margin, "a candidate is faster than a baseline when (t_base - t) / t_base > this",
      Range{0, 10});
    v("reward", reward,
      "milestone (-1/1/2/3 of the paper), speedup (speedup over eager if correct, else -1) "
      "or kevin (0.3*correct + speedup*correct)",
      OneOf{{"milestone", "speedup", "kevin"}});
    v("timing_mismatch_factor", timing_mismatch_factor,
      "FORBIDDEN when the trusted wall clock of the timed loop exceeds the candidate's own reported time "
      "by more than this factor (after subtracting the loop overhead measured on the baseline)",
      Range{1.1, 1000});
    v("mem_bandwidth_gbs", mem_bandwidth_gbs, "memory bandwidth for the physical-limit check; 0 picks by device",
      Range{0, 1e6});
    v("peak_tflops", peak_tflops, "peak compute for the physical-limit check; 0 picks by device", Range{0, 1e6});
    v("work_dir", work_dir, "where per-evaluation scratch directories go; empty: $TMPDIR/cuda-agent");
    v("cache_dir", cache_dir, "persistent caches (precompiled headers, baselines); empty: ~/.cache/cuda-agent");
    v("keep_work_dir", keep_work_dir, "keep each evaluation's scratch directory (debugging)");
    v("log_bytes", log_bytes, "compiler and run logs kept in the verdict, bytes", Range{256, 1 << 26});
    v("python", python, "Python interpreter with torch that runs the harness");
    v("harness_dir", harness_dir, "directory holding the cuda_agent_harness package; empty: the built-in one");
  }
};

}  // namespace cuda_agent::config
