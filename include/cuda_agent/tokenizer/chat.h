// Chat formatting for the two conventions of the supported model families,
// chosen from the chat_template in tokenizer_config.json:
//
//   ChatML (Qwen):  <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//   Llama-3:        <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
//                   ... <|start_header_id|>assistant<|end_header_id|>\n\n
//
// Only the message structure is rendered, not the Jinja template itself: no
// default system prompt is inserted (the agent always sends its own), and tool
// calls travel as plain text in the content.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::tokenizer {

enum class ChatStyle { kChatMl, kLlama3 };

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
};

// Reads tokenizer_config.json in `model_dir`; an error names the file when it
// is missing or its template is of neither kind.
StatusOr<ChatStyle> DetectChatStyle(const std::filesystem::path& model_dir);
StatusOr<ChatStyle> ParseChatStyle(const std::string& name);  // "chatml" or "llama3"

std::string FormatChat(ChatStyle style, const std::vector<ChatMessage>& messages, bool add_generation_prompt);

// The strings that end an assistant turn in `style`.
std::vector<std::string> ChatStopStrings(ChatStyle style);

}  // namespace cuda_agent::tokenizer
