#include "cuda_agent/tokenizer/chat.h"

#include <nlohmann/json.hpp>

#include "cuda_agent/util/file.h"

namespace cuda_agent::tokenizer {
namespace {

std::string Trim(const std::string& s) {
  const char* space = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(space);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

}  // namespace

StatusOr<ChatStyle> DetectChatStyle(const std::filesystem::path& model_dir) {
  auto path = model_dir / "tokenizer_config.json";
  CA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(path.string() + ": not valid JSON");
  std::string tmpl;
  const auto& t = j.value("chat_template", nlohmann::json());
  if (t.is_string()) {
    tmpl = t.get<std::string>();
  } else if (t.is_array()) {  // named templates: use "default"
    for (const auto& e : t)
      if (e.value("name", "") == "default") tmpl = e.value("template", "");
  }
  if (tmpl.empty()) {
    auto jinja = ReadFile(model_dir / "chat_template.jinja");  // newer transformers save it beside
    if (jinja.ok()) tmpl = *jinja;
  }
  if (tmpl.find("<|im_start|>") != std::string::npos) return ChatStyle::kChatMl;
  if (tmpl.find("<|start_header_id|>") != std::string::npos) return ChatStyle::kLlama3;
  return InvalidArgument(path.string() + ": chat_template is " + (tmpl.empty() ? "missing" : "of an unknown kind") +
                         " (supported: ChatML with <|im_start|>, Llama-3 with <|start_header_id|>); set the chat "
                         "style in the config");
}

StatusOr<ChatStyle> ParseChatStyle(const std::string& name) {
  if (name == "chatml") return ChatStyle::kChatMl;
  if (name == "llama3") return ChatStyle::kLlama3;
  return InvalidArgument("chat style '" + name + "' is not chatml or llama3");
}

std::string FormatChat(ChatStyle style, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  if (style == ChatStyle::kChatMl) {
    for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  out = "<|begin_of_text|>";
  for (const auto& m : messages)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + Trim(m.content) + "<|eot_id|>";
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::vector<std::string> ChatStopStrings(ChatStyle style) {
  if (style == ChatStyle::kChatMl) return {"<|im_end|>", "<|endoftext|>"};
  return {"<|eot_id|>", "<|end_of_text|>"};
}

}  // namespace cuda_agent::tokenizer
