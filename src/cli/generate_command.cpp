// `cuda-agent generate --model DIR --prompt TEXT`: sample from a Hugging Face
// checkpoint with the policy's own generator. The batch form reads JSONL
// ({"prompt": "..."} or {"messages": [{"role": ..., "content": ...}]} per line)
// and writes one JSON result per line: text, token ids, logprobs, finish reason.
#include <ATen/ATen.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "cuda_agent/model/generate.h"
#include "cuda_agent/tokenizer/chat.h"
#include "cuda_agent/tokenizer/tokenizer.h"

namespace cuda_agent::cli {
namespace {

using nlohmann::json;

struct Options {
  std::string model, prompt, input, output, device = "cpu", dtype = "float32", chat_style;
  std::string decode_kernels = "persistent";
  bool chat = false, overlap = true;
  int64_t max_new_tokens = 256, batch = 16, max_seq_len = 4096, top_k = 0;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
};

StatusOr<std::vector<int32_t>> PromptIds(const Options& o, const json& item, const tokenizer::Tokenizer& tok,
                                         const std::optional<tokenizer::ChatStyle>& style) {
  if (item.contains("messages")) {
    if (!style) return InvalidArgument("messages given, but the model has no chat style (use --chat-style)");
    std::vector<tokenizer::ChatMessage> messages;
    for (const auto& m : item["messages"]) messages.push_back({m.value("role", ""), m.value("content", "")});
    return tok.Encode(tokenizer::FormatChat(*style, messages, true));
  }
  std::string text = item.value("prompt", "");
  if (o.chat) {
    if (!style) return InvalidArgument("--chat, but the model has no chat style (use --chat-style)");
    return tok.Encode(tokenizer::FormatChat(*style, {{"user", text}}, true));
  }
  return tok.Encode(text);
}

int Run(const Options& o) {
  auto tok = tokenizer::Tokenizer::Load(o.model);
  if (!tok.ok()) return Fail(tok.status());
  std::optional<tokenizer::ChatStyle> style;
  if (!o.chat_style.empty()) {
    auto s = tokenizer::ParseChatStyle(o.chat_style);
    if (!s.ok()) return Fail(s.status());
    style = *s;
  } else if (auto s = tokenizer::DetectChatStyle(o.model); s.ok()) {
    style = *s;
  }
  model::LoadOptions lo;
  lo.dtype = o.dtype == "bfloat16" ? at::kBFloat16 : o.dtype == "float16" ? at::kHalf : at::kFloat;
  lo.device = c10::Device(o.device);
  if (lo.device.is_cuda() && !at::hasCUDA()) return Fail(FailedPrecondition("--device cuda, but no GPU is visible"));
  auto model = model::Transformer::Load(o.model, lo);
  if (!model.ok()) return Fail(model.status());

  std::vector<json> items;
  if (!o.input.empty()) {
    std::ifstream in(o.input);
    if (!in) return Fail(NotFound("cannot open --input " + o.input));
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        return Fail(InvalidArgument(o.input + ":" + std::to_string(line_no) + ": not a JSON object"));
      items.push_back(std::move(j));
    }
  } else {
    items.push_back({{"prompt", o.prompt}});
  }
  std::vector<model::GenerationRequest> requests;
  const auto& eos = (*model)->config().eos_token_ids;
  for (size_t i = 0; i < items.size(); ++i) {
    auto ids = PromptIds(o, items[i], **tok, style);
    if (!ids.ok()) return Fail(ids.status());
    model::GenerationRequest r;
    r.prompt = *ids;
    r.sampling.temperature = items[i].value("temperature", o.temperature);
    r.sampling.top_p = o.top_p;
    r.sampling.top_k = o.top_k;
    r.sampling.max_new_tokens = items[i].value("max_new_tokens", o.max_new_tokens);
    for (int64_t e : eos) r.sampling.stop_token_ids.push_back(static_cast<int32_t>(e));
    if (style)
      for (const auto& s : tokenizer::ChatStopStrings(*style))
        if (int32_t id = (*tok)->TokenId(s); id >= 0) r.sampling.stop_token_ids.push_back(id);
    requests.push_back(std::move(r));
  }
  model::GeneratorOptions go{o.batch, o.max_seq_len, o.seed};
  go.decode_kernels = model::ParseDecodeKernels(o.decode_kernels).value();  // checked by the option
  go.overlap = o.overlap;
  model::Generator gen(**model, *tok, go);
  auto start = std::chrono::steady_clock::now();
  auto results = gen.Generate(requests);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::unique_ptr<std::ofstream> file;
  if (!o.output.empty()) file = std::make_unique<std::ofstream>(o.output);
  std::ostream& out = file ? *file : std::cout;
  for (const auto& r : results) {
    std::string text = (*tok)->Decode(r.tokens, /*skip_special_tokens=*/true);
    if (o.input.empty() && o.output.empty()) {
      out << text << "\n";
      continue;
    }
    out << json{{"text", text}, {"tokens", r.tokens}, {"logprobs", r.logprobs}, {"finish_reason", r.finish_reason}}
               .dump()
        << "\n";
  }
  const auto& st = gen.stats();
  std::cerr << st.generated_tokens << " tokens in " << seconds << " s (" << st.generated_tokens / seconds
            << " tokens/s, " << st.decode_steps << " decode steps, " << st.prefill_tokens << " prompt tokens)\n";
  return 0;
}

}  // namespace

std::function<int()> AddGenerateCommand(CLI::App* app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app->add_subcommand("generate", "sample from a Hugging Face Llama/Qwen checkpoint");
  cmd->add_option("--model", o->model, "checkpoint directory (config.json, safetensors, tokenizer.json)")
      ->required();
  auto* prompt = cmd->add_option("--prompt", o->prompt, "prompt text");
  auto* input = cmd->add_option("--input", o->input, "JSONL of {\"prompt\"} or {\"messages\"} objects");
  prompt->excludes(input);
  cmd->add_option("--output", o->output, "write JSONL results here (default: stdout)");
  cmd->add_flag("--chat", o->chat, "wrap --prompt as a user message in the model's chat format");
  cmd->add_option("--chat-style", o->chat_style, "chatml or llama3 (default: from tokenizer_config.json)")
      ->check(CLI::IsMember({"chatml", "llama3"}));
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate at most")->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", o->temperature, "0: greedy")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p, "nucleus sampling threshold")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", o->top_k, "0: no limit")->check(CLI::NonNegativeNumber);
  cmd->add_option("--batch", o->batch, "sequences decoded together")->check(CLI::PositiveNumber);
  cmd->add_option("--max-seq-len", o->max_seq_len, "prompt + generated tokens per sequence")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
  cmd->add_option("--dtype", o->dtype, "float32, bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  cmd->add_option("--seed", o->seed, "sampling seed");
  cmd->add_option("--decode-kernels", o->decode_kernels,
                  "how decode steps of up to 8 rows run on CUDA: aten, fused (five kernels a layer) or persistent "
                  "(one kernel for every layer, Hopper; the default); larger batches, other GPUs and the CPU use aten")
      ->check(CLI::IsMember(model::DecodeKernelsNames()));
  cmd->add_flag("--overlap,!--no-overlap", o->overlap,
                "launch each decode step before reading the last one's tokens (CUDA graphs; the default)");
  return [o, prompt, input]() -> int {
    if (prompt->count() == 0 && input->count() == 0) return Fail(InvalidArgument("give --prompt or --input"));
    return Run(*o);
  };
}

}  // namespace cuda_agent::cli
