// Batched sampling from a Transformer with a preallocated KV cache and
// continuous batching: up to `max_batch` sequences decode together; one that
// finishes frees its slot, and the next request takes it. A slot keeps the
// keys and values of what it last held, so a request whose prompt extends
// them (the next turn of an agent, sent with the same cache_key) only
// prefills the new tokens.
//
//   Generator gen(model, tokenizer, {.max_batch = 64, .max_seq_len = 8192});
//   auto results = gen.Generate(requests);   // or Submit() + Step() from a loop
//
// Sampling (greedy, temperature, top-k, top-p) runs batched on the model's
// device; each result carries the log-probability of every sampled token under
// the distribution it was drawn from (for greedy: the untempered softmax).
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "cuda_agent/model/transformer.h"
#include "cuda_agent/tokenizer/tokenizer.h"

namespace cuda_agent::model {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;
  int64_t top_k = 0;  // 0: no limit
  int64_t max_new_tokens = 256;
  std::vector<int32_t> stop_token_ids;    // kept as the last token
  std::vector<std::string> stop_strings;  // kept in the text
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  std::string cache_key;  // e.g. a trajectory id: its next turn reuses the cached prefix
};

struct GenerationResult {
  int64_t id = -1;  // Submit()'s handle
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish_reason;  // stop_token, stop_string, length, context
  int64_t reused_prefix = 0;  // prompt tokens served from the cache
};

struct GeneratorOptions {
  int64_t max_batch = 16;      // KV-cache slots
  int64_t max_seq_len = 4096;  // prompt + generated tokens per sequence
  uint64_t seed = 0;
  int64_t prefill_chunk_tokens = 16384;  // new prompts prefilled together, rows x longest
  // On CUDA, decode steps replay CUDA graphs captured per (rows, visible keys)
  // bucket: rows are the slots up to the highest running one, rounded up to a
  // power of two; visible keys round up to a multiple of 128.
  bool cuda_graphs = true;
  // The same fixed-shape decode over leading slots without graphs, on any
  // device (lets CPU tests check what the graphs capture).
  bool slot_decode = false;
  // On CUDA, how decode steps run (Transformer::Decode): the persistent
  // kernel where the step fits it (up to 8 rows on Hopper), else ATen.
  DecodeKernels decode_kernels = DecodeKernels::kPersistent;
  // With slot decode (CUDA graphs, or slot_decode): each Step() launches the
  // next decode step before it reads the last one's tokens, which feed it on
  // the device, so the GPU does not wait for the host between steps. A
  // sequence that ended in the last step drops the token drawn for it in the
  // next; results come back one Step() later.
  bool overlap = true;
};

struct GeneratorStats {
  int64_t prefill_tokens = 0, reused_tokens = 0, decode_steps = 0, generated_tokens = 0;
  int64_t graphs_captured = 0, graph_replays = 0;
  // Slot decode steps whose kernels went out one by one: without graphs, and
  // with them the steps that are one persistent kernel (DecodeSlots).
  int64_t launched_steps = 0;
  // With `overlap`: the host's seconds launching steps (Launch: the step's
  // inputs, kernels and sampling) and blocked on the device for the step
  // before (Complete). A step whose launch starts after the device has
  // drained shows in the device's timeline as an idle gap.
  double host_launch_s = 0, host_wait_s = 0;
};

class Generator {
 public:
  // `tokenizer` may be null when no request uses stop strings.
  Generator(const Transformer& model, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
            const GeneratorOptions& options);
  ~Generator();

  // Queues a request; returns its id.
  int64_t Submit(GenerationRequest request);
  // Admits queued requests into free slots (prefill), then decodes one token
  // for every running sequence. Returns the sequences that finished.
  std::vector<GenerationResult> Step();
  bool Idle() const;
  // The trajectory `cache_key` is over: its slot's cache may go to anyone.
  void Release(const std::string& cache_key);
  // Forgets every cached prefix: call after the weights change (an update).
  void ResetCache();
  // Restarts the sampling random stream from `seed`.
  void Reseed(uint64_t seed);
  // Submits all, steps until done; results in request order. The generator
  // must be idle (no requests of Submit() pending).
  std::vector<GenerationResult> Generate(const std::vector<GenerationRequest>& requests);

  const GeneratorStats& stats() const { return stats_; }

 private:
  struct Slot;
  struct InFlight;
  void Admit(std::vector<GenerationResult>* finished);
  // [2, B] fp32 on the logits' device: one token per row of `logits` [B, V]
  // for the sequences in `slot_ids` (their ids, then their logprobs): one
  // kernel on CUDA (SampleTokens) unless a row asks for top-k or top-p, which
  // SampleWithAten serves. `host`, where given, pinned [2, B] fp32, receives
  // the same (on CUDA once the stream gets there).
  at::Tensor Sample(const at::Tensor& logits, const std::vector<int64_t>& slot_ids, at::Tensor* host = nullptr);
  // Sample, then each sequence's token appended on the host.
  void SampleAndAppend(const at::Tensor& logits, const std::vector<int64_t>& slot_ids,
                       std::vector<GenerationResult>* finished);
  // Appends a sampled token to `slot`'s sequence; ended sequences go to `finished`.
  void Append(Slot& slot, int32_t token, float logprob, std::vector<GenerationResult>* finished);
  // The running slots, in order; those that ended at admission go to `finished`.
  std::vector<int64_t> Running(std::vector<GenerationResult>* finished);
  // Step() with `overlap`: the decode step of `running`, launched and sampled
  // on the device, its tokens on their way to the host.
  std::unique_ptr<InFlight> Launch(const std::vector<int64_t>& running);
  // Waits for a launched step's tokens and appends them.
  void Complete(InFlight& step, std::vector<GenerationResult>* finished);
  // [2, B] fp32 on the logits' device: the tokens, then their logprobs;
  // temperature 0 is greedy; `filtered`: some row has top-k or top-p.
  at::Tensor SampleWithAten(const at::Tensor& logits, std::vector<double> temperatures,
                            const std::vector<double>& top_ps, const std::vector<int64_t>& top_ks, bool filtered);
  bool Finished(Slot& slot);
  // Logits [B, V] of one decode step for the running slots, through
  // DecodeSlots. The slots `fed` take their id on the device, from row
  // fed_rows[i] of `picks` (a launched step's Sample), not from `ids`.
  // `pick`: Transformer::Decode's (the head samples the row where it can).
  at::Tensor DecodeRunning(const std::vector<int64_t>& running, const std::vector<int64_t>& ids,
                           const std::vector<int64_t>& positions, const std::vector<int64_t>& fed = {},
                           const std::vector<int64_t>& fed_rows = {}, const at::Tensor& picks = {},
                           RowPick* pick = nullptr);
  // Logits [rows, V] of one decode step over slots 0..rows-1, whose ids and
  // positions are in decode_inputs_: on CUDA a graph replay, unless the
  // step is one persistent kernel (then launched, with `pick`).
  at::Tensor DecodeSlots(int64_t rows, int64_t span, RowPick* pick = nullptr);
  // DecodeSlots on CUDA: the (rows, span) graph, captured on first use, replayed into `out`.
  at::Tensor ReplayDecode(int64_t rows, int64_t span, const at::Tensor& ids, const at::Tensor& positions,
                          at::Tensor& out);

  const Transformer& model_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  GeneratorOptions options_;
  KvCache cache_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::deque<std::pair<int64_t, GenerationRequest>> queue_;
  int64_t next_id_ = 0;
  uint64_t clock_ = 0;  // for least-recently-used slot choice
  at::Generator rng_;
  at::Tensor sample_counters_;  // SampleTokens's, kept zero between steps
  GeneratorStats stats_;
  bool slot_decode_ = false;  // decode runs over leading slots (CUDA graphs)
  // The graphs' fixed inputs (ids; positions; then the fed slots, their
  // rows and the running slots, see DecodeRunning) and output.
  at::Tensor decode_inputs_, decode_logits_;
  at::Tensor decode_host_;  // [2, 5, max_batch] pinned staging for decode_inputs_, used in turn
  int64_t host_turn_ = 0;
  std::unique_ptr<InFlight> in_flight_;  // overlap: the step launched, its tokens not yet read
  struct Graphs;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace cuda_agent::model
