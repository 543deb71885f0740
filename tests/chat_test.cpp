#include <gtest/gtest.h>

#include "runtime/chat.h"

namespace zenmoe {
namespace {

// Excerpts of the real templates: enough for detection by substring.
const std::string kDeepSeekTemplate =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}";
const std::string kKimiTemplate =
    "{%- if message['role'] == 'user' -%}<|im_user|>user<|im_middle|>{%- endif -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}";

TEST(Chat, DetectsKnownTemplates) {
  auto ds = detect_chat_style(kDeepSeekTemplate);
  ASSERT_TRUE(ds.has_value());
  EXPECT_EQ(*ds, ChatStyle::DeepSeekV3);
  auto kimi = detect_chat_style(kKimiTemplate);
  ASSERT_TRUE(kimi.has_value());
  EXPECT_EQ(*kimi, ChatStyle::KimiK2);
  EXPECT_STREQ(chat_style_name(*kimi), "kimi-k2");
}

TEST(Chat, UnknownOrMissingTemplateIsAnError) {
  auto none = detect_chat_style("");
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().find("no chat template"), std::string::npos);
  auto chatml = detect_chat_style("{% for m in messages %}<|im_start|>{{m.role}}\n{{m.content}}<|im_end|>\n{% endfor %}");
  ASSERT_FALSE(chatml.has_value());
  EXPECT_NE(chatml.error().find("unknown chat template"), std::string::npos);
  EXPECT_EQ(chatml.error().find('\n'), std::string::npos);
  // Only part of the DeepSeek markers is not enough.
  EXPECT_FALSE(detect_chat_style("<｜User｜> <｜Assistant｜>").has_value());
}

TEST(Chat, FormatsDeepSeekV3) {
  auto s = format_chat(ChatStyle::DeepSeekV3,
                       {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}},
                       true);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, "Be brief.\n\n<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜>");
  auto no_gen = format_chat(ChatStyle::DeepSeekV3, {{"user", "Hi"}}, false);
  EXPECT_EQ(*no_gen, "<｜User｜>Hi");
  EXPECT_FALSE(format_chat(ChatStyle::DeepSeekV3, {{"tool", "x"}}, true).has_value());
}

TEST(Chat, FormatsKimiK2) {
  auto s = format_chat(ChatStyle::KimiK2, {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"tool", "T"}}, true);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s,
            "<|im_system|>system<|im_middle|>S<|im_end|><|im_user|>user<|im_middle|>U<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>A<|im_end|><|im_system|>tool<|im_middle|>T<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
  EXPECT_FALSE(format_chat(ChatStyle::KimiK2, {{"narrator", "x"}}, true).has_value());
}

}  // namespace
}  // namespace zenmoe
