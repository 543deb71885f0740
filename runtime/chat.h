// Chat prompt formatting for the chat styles zenmoe knows, recognised from the model's
// `tokenizer.chat_template` by the same substrings llama.cpp's built-in detection uses
// (spec §6.6). Anything else is an error: a wrong template silently degrades answers.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.h"

namespace zenmoe {

enum class ChatStyle {
  DeepSeekV3,  // <｜User｜>...<｜Assistant｜>...<｜end▁of▁sentence｜>
  KimiK2,      // <|im_user|>user<|im_middle|>...<|im_end|>
};

const char* chat_style_name(ChatStyle s);  // "deepseek-v3", "kimi-k2"

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
};

// Recognises the style of a Jinja template string. Errors: empty (the model has no template)
// or a template of an unknown family.
Expected<ChatStyle> detect_chat_style(const std::string& chat_template);

// Renders the conversation; with add_generation_prompt the assistant's turn is opened at the
// end. BOS is not included (the tokenizer adds it). Errors: a role the style has no place for.
Expected<std::string> format_chat(ChatStyle style, const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt);

}  // namespace zenmoe
