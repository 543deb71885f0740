#include "runtime/chat.h"

namespace zenmoe {
namespace {

constexpr const char* kDsUser = "<\xEF\xBD\x9C" "User\xEF\xBD\x9C>";            // <｜User｜>
constexpr const char* kDsAssistant = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";  // <｜Assistant｜>
// <｜end▁of▁sentence｜>
constexpr const char* kDsEnd = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
constexpr const char* kKimiAssistant = "<|im_assistant|>assistant<|im_middle|>";

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

Expected<std::string> format_deepseek_v3(const std::vector<ChatMessage>& messages, bool add_gen) {
  std::string out;
  for (const auto& m : messages) {
    if (m.role == "system")
      out += m.content + "\n\n";
    else if (m.role == "user")
      out += kDsUser + m.content;
    else if (m.role == "assistant")
      out += kDsAssistant + m.content + kDsEnd;
    else
      return Error{"chat role '" + m.role + "' has no place in the deepseek-v3 chat format"};
  }
  if (add_gen) out += kDsAssistant;
  return out;
}

Expected<std::string> format_kimi_k2(const std::vector<ChatMessage>& messages, bool add_gen) {
  std::string out;
  for (const auto& m : messages) {
    if (m.role == "system")
      out += "<|im_system|>system<|im_middle|>";
    else if (m.role == "user")
      out += "<|im_user|>user<|im_middle|>";
    else if (m.role == "assistant")
      out += kKimiAssistant;
    else if (m.role == "tool")
      out += "<|im_system|>tool<|im_middle|>";
    else
      return Error{"chat role '" + m.role + "' has no place in the kimi-k2 chat format"};
    out += m.content + "<|im_end|>";
  }
  if (add_gen) out += kKimiAssistant;
  return out;
}

}  // namespace

const char* chat_style_name(ChatStyle s) {
  switch (s) {
    case ChatStyle::DeepSeekV3: return "deepseek-v3";
    case ChatStyle::KimiK2: return "kimi-k2";
  }
  return "?";
}

Expected<ChatStyle> detect_chat_style(const std::string& t) {
  if (t.empty()) return Error{"the model has no chat template (tokenizer.chat_template)"};
  // Kimi first: its templates are the more specific match.
  if (contains(t, kKimiAssistant)) return ChatStyle::KimiK2;
  if (contains(t, kDsAssistant) && contains(t, kDsUser) && contains(t, kDsEnd)) return ChatStyle::DeepSeekV3;
  std::string head = t.substr(0, 60);
  for (char& c : head)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';  // keep the error on one line
  return Error{"unknown chat template (known: deepseek-v3, kimi-k2); it begins: '" + head +
               (t.size() > 60 ? "...'" : "'")};
}

Expected<std::string> format_chat(ChatStyle style, const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) {
  switch (style) {
    case ChatStyle::DeepSeekV3: return format_deepseek_v3(messages, add_generation_prompt);
    case ChatStyle::KimiK2: return format_kimi_k2(messages, add_generation_prompt);
  }
  return Error{"unknown chat style"};
}

}  // namespace zenmoe
