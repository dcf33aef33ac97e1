// Parity with Hugging Face: tokenizers trained by the `tokenizers` library
// (tests/tokenizer/make_fixtures.py) must encode, decode and format chats
// exactly as `tokenizers` and `transformers` do.
#include "cuda_agent/tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cuda_agent/tokenizer/chat.h"
#include "cuda_agent/util/file.h"
#include "cuda_agent/util/hash.h"

namespace cuda_agent::tokenizer {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// Made once per version of make_fixtures.py, in the build tree's test cache.
fs::path FixtureDir() {
  static const fs::path dir = [] {
    fs::path script = fs::path(CUDA_AGENT_TEST_FIXTURES) / "tokenizer" / "make_fixtures.py";
    fs::path d = fs::path(CUDA_AGENT_TEST_CACHE) / ("tokenizer-" + Sha256Hex(ReadFile(script).value()).substr(0, 12));
    if (fs::exists(d)) return d;
    fs::path tmp = d.string() + ".tmp" + std::to_string(::getpid());
    std::string cmd = "python3 " + script.string() + " " + tmp.string() + " > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "make_fixtures.py failed (are tokenizers and transformers installed?)";
    std::error_code ec;
    fs::rename(tmp, d, ec);  // another test process may have won the race: fine
    if (ec) fs::remove_all(tmp, ec);
    return d;
  }();
  return dir;
}

json Cases(const std::string& style) {
  auto text = ReadFile(FixtureDir() / style / "cases.json");
  EXPECT_TRUE(text.ok());
  return json::parse(*text);
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

class ParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParityTest, IdsAndDecodingsMatchHuggingFace) {
  auto tok = Tokenizer::Load(FixtureDir() / GetParam());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  json all = Cases(GetParam());
  EXPECT_GE(all["corpus_bytes"].get<int64_t>(), 1000000);
  EXPECT_EQ((*tok)->vocab_size(), all["vocab_size"].get<int32_t>());
  for (const auto& c : all["cases"]) {
    std::string text = c["text"];
    auto ids = (*tok)->Encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: " << text.substr(0, 2000) << "\nours: " << Show(ids).substr(0, 2000);
    EXPECT_EQ((*tok)->Encode(text, true), c["ids_special"].get<std::vector<int32_t>>()) << text.substr(0, 200);
    auto expected = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->Decode(expected), c["decoded"].get<std::string>()) << text.substr(0, 200);
    EXPECT_EQ((*tok)->Decode(expected, true), c["decoded_skip"].get<std::string>()) << text.substr(0, 200);
  }
}

TEST_P(ParityTest, ChatsRenderAsTransformersDoes) {
  auto style = DetectChatStyle(FixtureDir() / GetParam());
  ASSERT_TRUE(style.ok()) << style.status().ToString();
  EXPECT_EQ(*style, GetParam() == "qwen2" ? ChatStyle::kChatMl : ChatStyle::kLlama3);
  for (const auto& c : Cases(GetParam())["chats"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(FormatChat(*style, messages, c["add_generation_prompt"]), c["text"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Styles, ParityTest, ::testing::Values("qwen2", "gpt2"));

TEST(TokenizerTest, SpecialTokensAreSingleIdsAndCanBeSkipped) {
  auto tok = Tokenizer::Load(FixtureDir() / "qwen2").value();
  int32_t start = tok->TokenId("<|im_start|>");
  ASSERT_GE(start, 0);
  EXPECT_TRUE(tok->IsSpecial(start));
  auto ids = tok->Encode("<|im_start|>user");
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(tok->Decode(ids, true), "user");
  EXPECT_EQ(tok->Token(start), "<|im_start|>");
}

TEST(TokenizerTest, APartialCharacterDecodesToOneReplacementCharacter) {
  auto tok = Tokenizer::Load(FixtureDir() / "qwen2").value();
  auto ids = tok->Encode("東");  // three bytes; the byte tokens of a prefix of it form invalid UTF-8
  EXPECT_EQ(tok->Decode(ids), "東");
  std::vector<int32_t> byte_ids;  // the character's first two bytes as byte-level tokens
  for (const char* t : {"æ", "Ŀ"}) byte_ids.push_back(tok->TokenId(t));  // 0xE6 0x9D
  ASSERT_GE(byte_ids[0], 0);
  ASSERT_GE(byte_ids[1], 0);
  EXPECT_EQ(tok->Decode(byte_ids), "\xEF\xBF\xBD");
}

TEST(TokenizerTest, BadFilesAreRefusedWithTheFileAndKey) {
  fs::path dir = fs::temp_directory_path() / ("tokenizer-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& text) {
    std::ofstream(dir / "tokenizer.json") << text;
    return Tokenizer::Load(dir);
  };
  auto r = write("{not json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.json"), std::string::npos) << r.status().message();
  r = write(R"({"model": {"type": "WordPiece", "vocab": {}}})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.type"), std::string::npos) << r.status().message();
  r = write(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.merges[0]"), std::string::npos) << r.status().message();
  r = write(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pre_tokenizer.pattern"), std::string::npos) << r.status().message();
  r = write(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "NFKC"}})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("normalizer.type"), std::string::npos) << r.status().message();
  EXPECT_FALSE(Tokenizer::Load(dir / "missing").ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cuda_agent::tokenizer
