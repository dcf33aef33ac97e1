#include "cuda_agent/model/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "cuda_agent/model/fused_ops.h"

#ifdef CUDA_AGENT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace cuda_agent::model {

struct Generator::Slot {
  bool running = false;
  int64_t id = -1;
  GenerationRequest request;
  std::vector<int32_t> cached;  // tokens whose keys/values are in this slot, in order
  std::vector<int32_t> generated;
  std::vector<float> logprobs;
  std::string finish_reason;
  int64_t reused = 0;
  uint64_t last_used = 0;
};

// A decode step launched with `overlap`: row b decoded slot slots[b] for
// request ids[b]; its tokens and logprobs are in `picks` on the device and,
// once `copied` completes, in `host`. fed[b]: the next launched step took
// row b's token as its input (its key and value are cached).
struct Generator::InFlight {
  std::vector<int64_t> slots, ids;
  std::vector<uint8_t> fed;
  at::Tensor picks, host;
#ifdef CUDA_AGENT_WITH_CUDA
  at::cuda::CUDAEvent copied;
#endif
};

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Whether a sequence's draws take top-k or top-p (a sort of the row), in a
// vocabulary of V tokens.
bool Filtered(const SamplingParams& p, int64_t V) { return (p.top_k > 0 && p.top_k < V) || p.top_p < 1.0; }

at::Generator MakeRng(c10::Device device, uint64_t seed) {
#ifdef CUDA_AGENT_WITH_CUDA
  if (device.is_cuda()) {
    auto g = at::make_generator<at::CUDAGeneratorImpl>(device.index() < 0 ? 0 : device.index());
    g.set_current_seed(seed);
    return g;
  }
#endif
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

// Captured decode steps by (rows, span). They share one memory pool: replays
// run one at a time, and each writes its logits into decode_logits_.
struct Generator::Graphs {
#ifdef CUDA_AGENT_WITH_CUDA
  at::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<at::cuda::CUDAGraph>> by_shape;
#endif
};

Generator::Generator(const Transformer& model, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                     const GeneratorOptions& options)
    : model_(model), tokenizer_(std::move(tokenizer)), options_(options) {
  const LoadOptions& lo = model.options();
  cache_ = KvCache::Allocate(model.config(), options.max_batch, options.max_seq_len, lo.dtype, lo.device);
  for (int64_t i = 0; i < options.max_batch; ++i) slots_.push_back(std::make_unique<Slot>());
  rng_ = MakeRng(lo.device, options.seed);
  slot_decode_ = options.slot_decode;
#ifdef CUDA_AGENT_WITH_CUDA
  slot_decode_ |= options.cuda_graphs && lo.device.is_cuda();
#endif
  if (slot_decode_) {
    auto on = at::TensorOptions().device(lo.device);
    // Rows: token ids, positions, the fed slots, their rows, the running
    // slots (DecodeRunning); filled from pinned host memory by one kernel a
    // step (StageDecodeInputs).
    decode_inputs_ = at::zeros({5, options.max_batch}, on.dtype(at::kLong));
    decode_host_ =
        at::zeros({2, 5, options.max_batch}, at::TensorOptions().dtype(at::kLong).pinned_memory(lo.device.is_cuda()));
    decode_logits_ = at::empty({options.max_batch, model.config().vocab_size}, on.dtype(lo.dtype));
    graphs_ = std::make_unique<Graphs>();
  }
}

Generator::~Generator() = default;

void Generator::Reseed(uint64_t seed) { rng_ = MakeRng(model_.options().device, seed); }

int64_t Generator::Submit(GenerationRequest request) {
  int64_t id = next_id_++;
  queue_.emplace_back(id, std::move(request));
  return id;
}

bool Generator::Idle() const {
  if (!queue_.empty() || in_flight_) return false;
  return std::none_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->running; });
}

void Generator::Release(const std::string& cache_key) {
  for (auto& s : slots_)
    if (!s->running && s->request.cache_key == cache_key) s->request.cache_key.clear();
}

void Generator::ResetCache() {
  TORCH_CHECK(!in_flight_, "ResetCache() with a decode step in flight: step until the generator is idle first");
  for (auto& s : slots_) {
    s->cached.clear();
    if (!s->running) s->request.cache_key.clear();
  }
}

void Generator::Admit(std::vector<GenerationResult>* finished) {
  struct Prefill {
    int64_t slot, reuse, length;  // tokens [reuse, reuse + length) of the prompt run now
  };
  std::vector<Prefill> prefills;
  while (!queue_.empty()) {
    // A free slot: the one holding this request's key; else one no live key
    // holds, sharing the longest prefix, least recently used first; a slot
    // another key holds only when nothing else is free.
    auto& [id, request] = queue_.front();
    Slot* best = nullptr;
    auto score = [&](const Slot& s) {
      bool same_key = !request.cache_key.empty() && s.request.cache_key == request.cache_key;
      bool keyed = !s.request.cache_key.empty();
      return std::make_tuple(same_key ? 1 : 0, keyed ? 0 : 1,
                             static_cast<int64_t>(CommonPrefix(s.cached, request.prompt)), ~s.last_used);
    };
    for (auto& s : slots_)
      if (!s->running && (best == nullptr || score(*s) > score(*best))) best = s.get();
    if (best == nullptr) break;
    Slot& slot = *best;
    int64_t slot_index =
        std::find_if(slots_.begin(), slots_.end(), [&](const auto& s) { return s.get() == best; }) - slots_.begin();
    slot.running = true;
    slot.id = id;
    slot.request = std::move(request);
    queue_.pop_front();
    slot.generated.clear();
    slot.logprobs.clear();
    slot.finish_reason.clear();
    slot.last_used = ++clock_;
    const auto& prompt = slot.request.prompt;
    if (prompt.empty() || static_cast<int64_t>(prompt.size()) >= options_.max_seq_len) {
      slot.finish_reason = "context";
      continue;
    }
    // Reuse the cached prefix; at least the last prompt token is run again for its logits.
    int64_t reuse = std::min<int64_t>(CommonPrefix(slot.cached, prompt), static_cast<int64_t>(prompt.size()) - 1);
    slot.reused = reuse;
    stats_.reused_tokens += reuse;
    prefills.push_back({slot_index, reuse, static_cast<int64_t>(prompt.size()) - reuse});
    slot.cached.assign(prompt.begin(), prompt.end());
  }
  // The new prompts run together, right-padded, in chunks of at most
  // prefill_chunk_tokens (rows x longest). Padding writes keys and values past
  // each prompt's end, where nothing attends before the next token overwrites them.
  const c10::Device device = model_.options().device;
  for (size_t begin = 0; begin < prefills.size();) {
    size_t end = begin;
    int64_t longest = 0;
    while (end < prefills.size()) {
      int64_t l = std::max(longest, prefills[end].length);
      if (end > begin && l * static_cast<int64_t>(end - begin + 1) > options_.prefill_chunk_tokens) break;
      longest = l;
      ++end;
    }
    const int64_t rows = static_cast<int64_t>(end - begin);
    std::vector<int64_t> ids(rows * longest, 0), positions(rows * longest), slots(rows), last(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const Prefill& p = prefills[begin + r];
      const auto& prompt = slots_[p.slot]->request.prompt;
      for (int64_t t = 0; t < longest; ++t) {
        if (t < p.length) ids[r * longest + t] = prompt[p.reuse + t];
        positions[r * longest + t] = std::min(p.reuse + t, options_.max_seq_len - 1);
      }
      slots[r] = p.slot;
      last[r] = p.length - 1;
      stats_.prefill_tokens += p.length;
    }
    auto on = [&](const std::vector<int64_t>& v, std::vector<int64_t> shape) {
      return at::tensor(v, at::kLong).view(shape).to(device);
    };
    at::Tensor logits =
        model_.Forward(on(ids, {rows, longest}), on(positions, {rows, longest}), &cache_, on(slots, {rows}));
    at::Tensor index = on(last, {rows, 1, 1}).expand({rows, 1, logits.size(2)});
    SampleAndAppend(logits.gather(1, index).squeeze(1), slots, finished);
    begin = end;
  }
}

at::Tensor Generator::SampleWithAten(const at::Tensor& logits_in, std::vector<double> temps,
                                     const std::vector<double>& top_ps, const std::vector<int64_t>& top_ks,
                                     bool filtered) {
  const int64_t B = logits_in.size(0);
  at::Tensor logits = logits_in.to(at::kFloat);
  auto options = logits.options();
  std::vector<uint8_t> greedy(B);
  bool any_sampled = false;
  for (int64_t b = 0; b < B; ++b) {
    greedy[b] = temps[b] > 0 ? 0 : 1;
    any_sampled |= temps[b] > 0;
    if (temps[b] == 0) temps[b] = 1.0;
  }

  at::Tensor tokens = logits.argmax(-1);
  // log softmax at the chosen token, without writing the whole [B, V] log softmax.
  at::Tensor logprobs = logits.gather(1, tokens.unsqueeze(1)).squeeze(1) - at::logsumexp(logits, {-1});
  if (any_sampled && !filtered) {
    // Plain softmax sampling needs no sort: argmax of p / Exp(1) noise picks
    // index i with probability p_i.
    at::Tensor scaled = logits / at::tensor(temps, at::kDouble).to(options).unsqueeze(1);
    at::Tensor log_p = at::log_softmax(scaled, -1);
    at::Tensor noise = at::empty_like(log_p).exponential_(1.0, rng_);
    at::Tensor sampled = (log_p - noise.log()).argmax(-1);
    at::Tensor greedy_mask = at::tensor(greedy, at::kByte).to(logits.device()).to(at::kBool);
    tokens = at::where(greedy_mask, tokens, sampled);
    logprobs = at::where(greedy_mask, logprobs, log_p.gather(1, sampled.unsqueeze(1)).squeeze(1));
  } else if (any_sampled) {
    at::Tensor scaled = logits / at::tensor(temps, at::kDouble).to(options).unsqueeze(1);
    // Top-k and top-p on the sorted row: keep rank < k and the smallest prefix
    // whose probability reaches p (the first token always stays).
    auto [sorted, order] = scaled.sort(-1, /*descending=*/true);
    at::Tensor probs = at::softmax(sorted, -1);
    at::Tensor before = probs.cumsum(-1) - probs;
    at::Tensor rank = at::arange(sorted.size(1), options.dtype(at::kLong)).unsqueeze(0);
    at::Tensor keep = (rank < at::tensor(top_ks, at::kLong).to(logits.device()).unsqueeze(1))
                          .logical_and(before < at::tensor(top_ps, at::kDouble).to(options).unsqueeze(1));
    keep.select(1, 0).fill_(true);
    at::Tensor masked = sorted.masked_fill(keep.logical_not(), -std::numeric_limits<float>::infinity());
    at::Tensor dist = at::softmax(masked, -1);
    at::Tensor pick = at::multinomial(dist, 1, false, rng_);  // index into the sorted row
    at::Tensor sampled = order.gather(1, pick).squeeze(1);
    at::Tensor sampled_logprob = at::log_softmax(masked, -1).gather(1, pick).squeeze(1);
    at::Tensor greedy_mask = at::tensor(greedy, at::kByte).to(logits.device()).to(at::kBool);
    tokens = at::where(greedy_mask, tokens, sampled);
    logprobs = at::where(greedy_mask, logprobs, sampled_logprob);
  }
  return at::stack({tokens.to(at::kFloat), logprobs});
}

at::Tensor Generator::Sample(const at::Tensor& logits, const std::vector<int64_t>& slot_ids, at::Tensor* host) {
  const int64_t B = static_cast<int64_t>(slot_ids.size()), V = logits.size(1);
  TORCH_CHECK(V <= (int64_t{1} << 24), "vocabularies past 2^24 tokens are not supported");
  std::vector<double> temps(B), top_ps(B);  // temperature 0: greedy
  std::vector<int64_t> top_ks(B);
  bool filtered = false;
  for (int64_t b = 0; b < B; ++b) {
    const SamplingParams& p = slots_[slot_ids[b]]->request.sampling;
    temps[b] = std::max(p.temperature, 0.0);
    top_ps[b] = p.top_p;
    top_ks[b] = p.top_k > 0 ? p.top_k : V;
    filtered |= Filtered(p, V);
  }
  // [2, B]: token ids (exact in float32 below 2^24), then their logprobs; one transfer.
  if (logits.is_cuda() && HaveFusedKernels() && !filtered)
    return SampleTokens(logits, temps, rng_, &sample_counters_, host);  // writes *host itself
  at::Tensor picks = SampleWithAten(logits, temps, top_ps, top_ks, filtered);
  if (host) CopyToPinned(picks, *host);
  return picks;
}

void Generator::SampleAndAppend(const at::Tensor& logits, const std::vector<int64_t>& slot_ids,
                                std::vector<GenerationResult>* finished) {
  const int64_t B = static_cast<int64_t>(slot_ids.size());
  at::Tensor host = Sample(logits, slot_ids).to(at::kCPU);
  const float* tok = host.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) Append(*slots_[slot_ids[b]], static_cast<int32_t>(tok[b]), tok[B + b], finished);
}

void Generator::Append(Slot& s, int32_t token, float logprob, std::vector<GenerationResult>* finished) {
  s.generated.push_back(token);
  s.logprobs.push_back(logprob);
  ++stats_.generated_tokens;
  if (Finished(s)) {
    finished->push_back({s.id, s.generated, s.logprobs, s.finish_reason, s.reused});
    s.running = false;
  }
}

bool Generator::Finished(Slot& s) {
  const SamplingParams& p = s.request.sampling;
  int32_t last = s.generated.back();
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), last) != p.stop_token_ids.end()) {
    s.finish_reason = "stop_token";
  } else if (!p.stop_strings.empty() && tokenizer_) {
    size_t tail = std::min<size_t>(s.generated.size(), 32);
    std::string text =
        tokenizer_->Decode(std::vector<int32_t>(s.generated.end() - static_cast<int64_t>(tail), s.generated.end()));
    for (const auto& stop : p.stop_strings)
      if (!stop.empty() && text.find(stop) != std::string::npos) s.finish_reason = "stop_string";
  }
  if (s.finish_reason.empty() && static_cast<int64_t>(s.generated.size()) >= p.max_new_tokens)
    s.finish_reason = "length";
  if (s.finish_reason.empty() &&
      static_cast<int64_t>(s.request.prompt.size() + s.generated.size()) >= options_.max_seq_len)
    s.finish_reason = "context";
  return !s.finish_reason.empty();
}

std::vector<int64_t> Generator::Running(std::vector<GenerationResult>* finished) {
  std::vector<int64_t> running;
  for (int64_t i = 0; i < static_cast<int64_t>(slots_.size()); ++i) {
    Slot& s = *slots_[i];
    if (!s.running) continue;
    if (!s.finish_reason.empty()) {  // ended at admission: empty or too long
      finished->push_back({s.id, s.generated, s.logprobs, s.finish_reason, s.reused});
      s.running = false;
      continue;
    }
    running.push_back(i);
  }
  return running;
}

std::vector<GenerationResult> Generator::Step() {
  c10::InferenceMode inference;
  std::vector<GenerationResult> finished;
  if (options_.overlap && slot_decode_) {
    // The next step first, fed on the device; then the last step's tokens;
    // then new requests, which decode from the next Step().
    std::vector<int64_t> running = Running(&finished);
    const auto start = std::chrono::steady_clock::now();
    std::unique_ptr<InFlight> next = running.empty() ? nullptr : Launch(running);
    stats_.host_launch_s += SecondsSince(start);
    if (in_flight_) Complete(*in_flight_, &finished);
    in_flight_ = std::move(next);
    Admit(&finished);
    return finished;
  }
  Admit(&finished);
  std::vector<int64_t> running = Running(&finished);
  if (running.empty()) return finished;
  const c10::Device device = model_.options().device;
  const int64_t B = static_cast<int64_t>(running.size());
  std::vector<int64_t> ids(B), positions(B);
  for (int64_t b = 0; b < B; ++b) {
    Slot& s = *slots_[running[b]];
    ids[b] = s.generated.back();
    positions[b] = static_cast<int64_t>(s.cached.size());
    s.cached.push_back(s.generated.back());
    s.last_used = ++clock_;
  }
  auto on = [&](std::vector<int64_t>& v, std::vector<int64_t> shape) {
    return at::tensor(v, at::kLong).view(shape).to(device);
  };
  at::Tensor logits =
      slot_decode_ ? DecodeRunning(running, ids, positions)
                   : model_.Forward(on(ids, {B, 1}), on(positions, {B, 1}), &cache_, on(running, {B})).select(1, 0);
  ++stats_.decode_steps;
  SampleAndAppend(logits, running, &finished);
  return finished;
}

std::unique_ptr<Generator::InFlight> Generator::Launch(const std::vector<int64_t>& running) {
  const int64_t B = static_cast<int64_t>(running.size());
  auto step = std::make_unique<InFlight>();
  step->slots = running;
  step->fed.assign(running.size(), 0);
  std::vector<int64_t> ids(B), positions(B), fed, fed_rows;
  for (int64_t b = 0; b < B; ++b) {
    Slot& s = *slots_[running[b]];
    step->ids.push_back(s.id);
    positions[b] = static_cast<int64_t>(s.cached.size());
    s.last_used = ++clock_;
    // The token to feed: the launched step's for this sequence, on the
    // device; else the last appended one (the first after a prefill).
    int64_t row = -1;
    for (size_t r = 0; in_flight_ && r < in_flight_->slots.size(); ++r)
      if (in_flight_->slots[r] == running[b] && in_flight_->ids[r] == s.id) row = static_cast<int64_t>(r);
    if (row >= 0) {
      in_flight_->fed[static_cast<size_t>(row)] = 1;  // cached once its value is read (Complete)
      fed.push_back(running[b]);
      fed_rows.push_back(row);
    } else {
      ids[b] = s.generated.back();
      s.cached.push_back(s.generated.back());
    }
  }
  const bool cuda = model_.options().device.is_cuda();
  step->host = at::empty({2, B}, at::TensorOptions().dtype(at::kFloat).pinned_memory(cuda));
  // One row with no top-k or top-p: the LM head samples it where it can.
  const SamplingParams& sampling = slots_[running[0]]->request.sampling;
  RowPick pick{sampling.temperature, &rng_, &sample_counters_, &step->host, {}};
  const bool fusable = cuda && B == 1 && HaveFusedKernels() && !Filtered(sampling, model_.config().vocab_size);
  at::Tensor logits = DecodeRunning(running, ids, positions, fed, fed_rows,
                                    in_flight_ ? in_flight_->picks : at::Tensor(), fusable ? &pick : nullptr);
  ++stats_.decode_steps;
  step->picks = pick.picks.defined() ? pick.picks : Sample(logits, running, &step->host);
#ifdef CUDA_AGENT_WITH_CUDA
  if (cuda) step->copied.record();
#endif
  return step;
}

void Generator::Complete(InFlight& step, std::vector<GenerationResult>* finished) {
#ifdef CUDA_AGENT_WITH_CUDA
  if (step.picks.is_cuda()) {
    const auto start = std::chrono::steady_clock::now();
    step.copied.synchronize();
    stats_.host_wait_s += SecondsSince(start);
  }
#endif
  const int64_t B = static_cast<int64_t>(step.slots.size());
  const float* tok = step.host.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    Slot& s = *slots_[step.slots[b]];
    // A sequence that ended in the step before: this row's token is not its.
    if (!s.running || s.id != step.ids[b] || !s.finish_reason.empty()) continue;
    const auto token = static_cast<int32_t>(tok[b]);
    if (step.fed[b]) s.cached.push_back(token);
    Append(s, token, tok[B + b], finished);
  }
}

at::Tensor Generator::DecodeRunning(const std::vector<int64_t>& running, const std::vector<int64_t>& ids,
                                    const std::vector<int64_t>& positions, const std::vector<int64_t>& fed,
                                    const std::vector<int64_t>& fed_rows, const at::Tensor& picks, RowPick* pick) {
  // Every slot up to the highest running one decodes; idle rows write at
  // position max_seq_len - 1, which no sequence ever reads (prompts and
  // generated tokens stop one short of it).
  int64_t rows = 1;
  while (rows < running.back() + 1) rows *= 2;
  rows = std::min(rows, options_.max_batch);
  // The staging buffers take turns: this one's last copy was two steps ago,
  // before the last step whose tokens were read.
  at::Tensor staging = decode_host_[host_turn_];
  host_turn_ ^= 1;
  int64_t* host = staging.data_ptr<int64_t>();
  const int64_t stride = options_.max_batch;
  std::fill(host, host + rows, 0);
  std::fill(host + stride, host + stride + rows, options_.max_seq_len - 1);
  int64_t span = 0;
  for (size_t b = 0; b < running.size(); ++b) {
    host[running[b]] = ids[b];
    host[stride + running[b]] = positions[b];
    span = std::max(span, positions[b] + 1);
  }
  std::copy(fed.begin(), fed.end(), host + 2 * stride);
  std::copy(fed_rows.begin(), fed_rows.end(), host + 3 * stride);
  std::copy(running.begin(), running.end(), host + 4 * stride);
  span = std::min((span + 127) / 128 * 128, options_.max_seq_len);
  const int64_t n = static_cast<int64_t>(fed.size());
  // Every row's entries lie within the first `rows` columns.
  StageDecodeInputs(staging, rows, picks, n, decode_inputs_);
  at::Tensor logits = DecodeSlots(rows, span, pick);
  if (static_cast<int64_t>(running.size()) == rows) return logits;
  // The running rows, indexed on the device (a copy from pageable memory
  // here could wait for the GPU and undo `overlap`).
  return logits.index_select(0, decode_inputs_[4].narrow(0, 0, static_cast<int64_t>(running.size())));
}

at::Tensor Generator::DecodeSlots(int64_t rows, int64_t span, RowPick* pick) {
  at::Tensor ids = decode_inputs_[0].narrow(0, 0, rows).view({rows, 1});
  at::Tensor positions = decode_inputs_[1].narrow(0, 0, rows).view({rows, 1});
  at::Tensor out = decode_logits_.narrow(0, 0, rows);
#ifdef CUDA_AGENT_WITH_CUDA
  // A step that is one persistent kernel is launched, not replayed: its few
  // launches cost the host less than the step takes, and starting a graph
  // costs the GPU more than it saves (batch-1 decode on an H200 1719 tok/s
  // launched against 1709 replayed).
  if (options_.cuda_graphs && decode_inputs_.is_cuda() &&
      !model_.DecodesInOneKernel(rows, span, options_.decode_kernels))
    return ReplayDecode(rows, span, ids, positions, out);
#endif
  ++stats_.launched_steps;
  return model_.Decode(ids, positions, cache_, span, options_.decode_kernels, &out, pick);
}

#ifdef CUDA_AGENT_WITH_CUDA
at::Tensor Generator::ReplayDecode(int64_t rows, int64_t span, const at::Tensor& ids, const at::Tensor& positions,
                                   at::Tensor& out) {
  auto& graph = graphs_->by_shape[{rows, span}];
  if (!graph) {
    // Capture on a side stream after one eager run there (it loads the
    // kernels and cuBLAS workspaces; its cache writes are the ones the replay
    // repeats).
    c10::cuda::getCurrentCUDAStream().synchronize();
    auto stream = c10::cuda::getStreamFromPool(false, decode_inputs_.device().index());
    {
      c10::cuda::CUDAStreamGuard guard(stream);
      model_.Decode(ids, positions, cache_, span, options_.decode_kernels, &out);
      graph = std::make_unique<at::cuda::CUDAGraph>();
      graph->capture_begin(graphs_->pool);
      model_.Decode(ids, positions, cache_, span, options_.decode_kernels, &out);
      graph->capture_end();
    }
    stream.synchronize();
    ++stats_.graphs_captured;
  }
  graph->replay();
  ++stats_.graph_replays;
  return out;
}
#endif

std::vector<GenerationResult> Generator::Generate(const std::vector<GenerationRequest>& requests) {
  TORCH_CHECK(Idle(), "Generate() needs an idle generator: finish Submit()/Step() work first");
  const int64_t first = next_id_;  // ids are handed out consecutively
  for (const auto& r : requests) Submit(r);
  std::vector<GenerationResult> results(requests.size());
  while (!Idle())
    for (auto& r : Step()) results[static_cast<size_t>(r.id - first)] = std::move(r);
  return results;
}

}  // namespace cuda_agent::model
