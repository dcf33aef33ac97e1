#include "cuda_agent/tokenizer/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <functional>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "cuda_agent/util/file.h"
#include "text.h"

namespace cuda_agent::tokenizer {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The GPT-2 pre-tokenizer pattern, used by ByteLevel when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// One step of the pre-tokenizer pipeline.
struct PreStep {
  enum Kind { kSplit, kByteLevel } kind;
  std::unique_ptr<Regex> regex;  // kSplit; kByteLevel with use_regex
  bool remove_matches = false;   // kSplit "Removed"
  bool add_prefix_space = false;  // kByteLevel
};

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip;
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

struct Tokenizer::Impl {
  std::string file;  // for messages
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_token;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left, right) -> (rank, merged)
  bool ignore_merges = false;
  int32_t unk_id = -1;
  std::vector<AddedToken> added;
  std::vector<bool> special;
  std::array<std::vector<size_t>, 256> added_by_first_byte;  // indices into `added`, longest first
  bool nfc = false;
  std::vector<PreStep> pre;
  std::vector<int32_t> template_prefix, template_suffix;
  bool byte_level_decoder = true;

  static uint64_t Key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

  Status Fail(const std::string& key, const std::string& why) const {
    return InvalidArgument(file + ": " + key + ": " + why);
  }

  Status LoadModel(const json& model);
  Status LoadNormalizer(const json& normalizer);
  Status LoadPreTokenizer(const json& pre_tokenizer, const std::string& key);
  Status LoadPostProcessor(const json& post, const std::string& key);

  // Segments of `text`: plain text (id -1) and added tokens (their id).
  std::vector<std::pair<std::string_view, int32_t>> SplitAdded(std::string_view text) const;
  void EncodePlain(std::string_view text, std::vector<int32_t>* out) const;
  void Bpe(const std::string& word, std::vector<int32_t>* out) const;
};

Status Tokenizer::Impl::LoadModel(const json& model) {
  if (!model.is_object() || model.value("type", "") != "BPE")
    return Fail("model.type", "only BPE models are supported, not '" +
                                  (model.is_object() ? model.value("type", std::string("?")) : std::string("?")) + "'");
  if (!model.contains("vocab") || !model["vocab"].is_object()) return Fail("model.vocab", "missing or not an object");
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) return Fail("model.vocab." + token, "id is not an integer >= 0");
    vocab[token] = id.get<int32_t>();
  }
  if (model.value("continuing_subword_prefix", json()).is_string() || model.value("end_of_word_suffix", json()).is_string())
    return Fail("model", "continuing_subword_prefix / end_of_word_suffix are not supported");
  ignore_merges = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = vocab.find(model["unk_token"].get<std::string>());
    if (it != vocab.end()) unk_id = it->second;
  }
  if (!model.contains("merges") || !model["merges"].is_array()) return Fail("model.merges", "missing or not a list");
  int32_t rank = 0;
  for (const auto& m : model["merges"]) {
    std::string left, right;
    if (m.is_string()) {  // "a b"
      std::string s = m.get<std::string>();
      size_t space = s.find(' ', 1);
      if (space == std::string::npos) return Fail("model.merges[" + std::to_string(rank) + "]", "'" + s + "' is not 'a b'");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return Fail("model.merges[" + std::to_string(rank) + "]", "neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto l = vocab.find(left), r = vocab.find(right), merged = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || merged == vocab.end())
      return Fail("model.merges[" + std::to_string(rank) + "]", "'" + left + " " + right + "' uses tokens not in the vocab");
    merges.emplace(Key(l->second, r->second), std::make_pair(rank, merged->second));
    ++rank;
  }
  return Status::Ok();
}

Status Tokenizer::Impl::LoadNormalizer(const json& normalizer) {
  if (normalizer.is_null()) return Status::Ok();
  std::string type = normalizer.value("type", "");
  if (type == "NFC") {
    nfc = true;
    return Status::Ok();
  }
  if (type == "Sequence") {
    for (const auto& n : normalizer.value("normalizers", json::array())) CA_RETURN_IF_ERROR(LoadNormalizer(n));
    return Status::Ok();
  }
  return Fail("normalizer.type", "'" + type + "' is not supported (only NFC)");
}

Status Tokenizer::Impl::LoadPreTokenizer(const json& p, const std::string& key) {
  if (p.is_null()) return Status::Ok();
  std::string type = p.value("type", "");
  if (type == "Sequence") {
    int i = 0;
    for (const auto& step : p.value("pretokenizers", json::array()))
      CA_RETURN_IF_ERROR(LoadPreTokenizer(step, key + ".pretokenizers[" + std::to_string(i++) + "]"));
    return Status::Ok();
  }
  PreStep step;
  if (type == "Split") {
    step.kind = PreStep::kSplit;
    const json& pattern = p.value("pattern", json());
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern["Regex"].get<std::string>();
    } else if (pattern.contains("String")) {  // a literal: quote it
      regex = "\\Q" + pattern["String"].get<std::string>() + "\\E";
    } else {
      return Fail(key + ".pattern", "neither Regex nor String");
    }
    if (p.value("invert", false)) return Fail(key + ".invert", "inverted splits are not supported");
    std::string behavior = p.value("behavior", "");
    if (behavior != "Isolated" && behavior != "Removed")
      return Fail(key + ".behavior", "'" + behavior + "' is not supported (Isolated, Removed)");
    step.remove_matches = behavior == "Removed";
    auto compiled = Regex::Compile(regex);
    if (!compiled.ok()) return Fail(key + ".pattern", compiled.status().message());
    step.regex = std::move(*compiled);
  } else if (type == "ByteLevel") {
    step.kind = PreStep::kByteLevel;
    step.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) step.regex = Regex::Compile(kGpt2Pattern).value();
  } else {
    return Fail(key + ".type", "'" + type + "' is not supported (Split, ByteLevel, Sequence)");
  }
  pre.push_back(std::move(step));
  return Status::Ok();
}

Status Tokenizer::Impl::LoadPostProcessor(const json& p, const std::string& key) {
  if (p.is_null()) return Status::Ok();
  std::string type = p.value("type", "");
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  if (type == "Sequence") {
    int i = 0;
    for (const auto& step : p.value("processors", json::array()))
      CA_RETURN_IF_ERROR(LoadPostProcessor(step, key + ".processors[" + std::to_string(i++) + "]"));
    return Status::Ok();
  }
  if (type != "TemplateProcessing") return Fail(key + ".type", "'" + type + "' is not supported");
  bool seen_sequence = false;
  for (const auto& item : p.value("single", json::array())) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken")) return Fail(key + ".single", "items are SpecialToken or Sequence");
    std::string name = item["SpecialToken"].value("id", "");
    const json& entry = p.value("special_tokens", json::object()).value(name, json());
    if (!entry.is_object()) return Fail(key + ".special_tokens", "no entry for '" + name + "'");
    for (const auto& id : entry.value("ids", json::array()))
      (seen_sequence ? template_suffix : template_prefix).push_back(id.get<int32_t>());
  }
  return Status::Ok();
}

std::vector<std::pair<std::string_view, int32_t>> Tokenizer::Impl::SplitAdded(std::string_view text) const {
  std::vector<std::pair<std::string_view, int32_t>> out;
  size_t plain_start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (size_t index : added_by_first_byte[static_cast<unsigned char>(text[i])]) {
      const AddedToken& a = added[index];
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + hit->content.size();
    if (hit->lstrip)
      while (begin > plain_start && IsSpace(text[begin - 1])) --begin;
    if (hit->rstrip)
      while (end < text.size() && IsSpace(text[end])) ++end;
    if (begin > plain_start) out.emplace_back(text.substr(plain_start, begin - plain_start), -1);
    out.emplace_back(text.substr(begin, end - begin), hit->id);
    plain_start = i = end;
  }
  if (plain_start < text.size()) out.emplace_back(text.substr(plain_start), -1);
  return out;
}

void Tokenizer::Impl::Bpe(const std::string& word, std::vector<int32_t>* out) const {
  if (ignore_merges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  // The word's characters as a linked list of symbols; the lowest-ranked
  // adjacent pair merges first, leftmost first among equal ranks.
  struct Symbol {
    int32_t id;
    int prev, next;
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < word.size();) {
    size_t n = CharLength(static_cast<unsigned char>(word[i]));
    auto it = vocab.find(word.substr(i, n));
    i += n;
    int32_t id = it != vocab.end() ? it->second : unk_id;
    if (id < 0) continue;  // no unk token: dropped, as in Hugging Face
    int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  using Candidate = std::tuple<int32_t, int, int32_t, int32_t>;  // rank, left position, left id, right id
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    int right = symbols[left].next;
    auto it = merges.find(Key(symbols[left].id, symbols[right].id));
    if (it != merges.end()) queue.emplace(it->second.first, left, symbols[left].id, symbols[right].id);
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    auto [rank, left, left_id, right_id] = queue.top();
    queue.pop();
    Symbol& l = symbols[left];
    if (l.id != left_id || l.next < 0 || symbols[l.next].id != right_id) continue;  // stale
    int right = l.next;
    l.id = merges.at(Key(left_id, right_id)).second;
    l.next = symbols[right].next;
    if (l.next >= 0) symbols[l.next].prev = left;
    symbols[right].id = -1;
    consider(l.prev);
    consider(left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

void Tokenizer::Impl::EncodePlain(std::string_view raw, std::vector<int32_t>* out) const {
  std::string text(raw);
  if (nfc && !text.empty()) {
    utf8proc_uint8_t* composed = nullptr;
    utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                      static_cast<utf8proc_ssize_t>(text.size()), &composed,
                                      static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n >= 0) text.assign(reinterpret_cast<const char*>(composed), static_cast<size_t>(n));
    std::free(composed);
  }
  std::vector<std::string> pieces{text};
  bool byte_level = false;
  for (const auto& step : pre) {
    std::vector<std::string> next;
    for (auto& piece : pieces) {
      if (step.kind == PreStep::kByteLevel && step.add_prefix_space && !piece.empty() && piece[0] != ' ')
        piece.insert(piece.begin(), ' ');
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      size_t last = 0;
      for (auto [b, e] : step.regex->FindAll(piece)) {
        if (b > last) next.push_back(piece.substr(last, b - last));
        if (!step.remove_matches) next.push_back(piece.substr(b, e - b));
        last = e;
      }
      if (last < piece.size()) next.push_back(piece.substr(last));
    }
    pieces = std::move(next);
    byte_level |= step.kind == PreStep::kByteLevel;
  }
  const ByteMap& bytes = Bytes();
  for (const auto& piece : pieces) {
    if (piece.empty()) continue;
    if (!byte_level) {
      Bpe(piece, out);
      continue;
    }
    std::string mapped;
    for (unsigned char c : piece) mapped += bytes.to_char[c];
    Bpe(mapped, out);
  }
}

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::Load(const fs::path& path) {
  fs::path file = fs::is_directory(path) ? path / "tokenizer.json" : path;
  CA_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(file.string() + ": not a JSON object");
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  Impl& impl = *t->impl_;
  impl.file = file.string();
  CA_RETURN_IF_ERROR(impl.LoadModel(j.value("model", json())));
  CA_RETURN_IF_ERROR(impl.LoadNormalizer(j.value("normalizer", json())));
  CA_RETURN_IF_ERROR(impl.LoadPreTokenizer(j.value("pre_tokenizer", json()), "pre_tokenizer"));
  CA_RETURN_IF_ERROR(impl.LoadPostProcessor(j.value("post_processor", json()), "post_processor"));
  const json& decoder = j.value("decoder", json());
  if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel")
    return impl.Fail("decoder.type", "'" + decoder.value("type", std::string()) + "' is not supported (ByteLevel)");
  int i = 0;
  for (const auto& a : j.value("added_tokens", json::array())) {
    std::string key = "added_tokens[" + std::to_string(i++) + "]";
    if (!a.contains("id") || !a.contains("content")) return impl.Fail(key, "needs id and content");
    AddedToken token{a["id"].get<int32_t>(), a["content"].get<std::string>(), a.value("special", false),
                     a.value("lstrip", false), a.value("rstrip", false)};
    if (token.content.empty()) return impl.Fail(key + ".content", "empty");
    impl.added.push_back(token);
  }
  int32_t size = 0;
  for (const auto& [token, id] : impl.vocab) size = std::max(size, id + 1);
  for (const auto& a : impl.added) size = std::max(size, a.id + 1);
  impl.id_to_token.assign(static_cast<size_t>(size), "");
  impl.special.assign(static_cast<size_t>(size), false);
  for (const auto& [token, id] : impl.vocab) impl.id_to_token[id] = token;
  for (size_t k = 0; k < impl.added.size(); ++k) {
    const auto& a = impl.added[k];
    impl.id_to_token[a.id] = a.content;
    impl.special[a.id] = a.special;
    impl.added_by_first_byte[static_cast<unsigned char>(a.content[0])].push_back(k);
  }
  for (auto& list : impl.added_by_first_byte)
    std::stable_sort(list.begin(), list.end(),
                     [&](size_t x, size_t y) { return impl.added[x].content.size() > impl.added[y].content.size(); });
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view raw, bool add_special_tokens) const {
  std::string text = ValidUtf8(raw);
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = impl_->template_prefix;
  for (const auto& [segment, id] : impl_->SplitAdded(text)) {
    if (id >= 0)
      ids.push_back(id);
    else
      impl_->EncodePlain(segment, &ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), impl_->template_suffix.begin(), impl_->template_suffix.end());
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const ByteMap& bytes = Bytes();
  std::string raw;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && impl_->special[id]) continue;
    const std::string& token = impl_->id_to_token[id];
    for (size_t i = 0; i < token.size();) {
      size_t n = CharLength(static_cast<unsigned char>(token[i]));
      std::string ch = token.substr(i, n);
      auto it = bytes.to_byte.find(ch);
      if (it != bytes.to_byte.end())
        raw += static_cast<char>(it->second);
      else
        raw += ch;
      i += n;
    }
  }
  return ValidUtf8(raw);
}

int32_t Tokenizer::TokenId(std::string_view token) const {
  for (const auto& a : impl_->added)
    if (a.content == token) return a.id;
  auto it = impl_->vocab.find(std::string(token));
  return it == impl_->vocab.end() ? -1 : it->second;
}

const std::string& Tokenizer::Token(int32_t id) const {
  static const std::string kNone;
  return id >= 0 && id < vocab_size() ? impl_->id_to_token[id] : kNone;
}

bool Tokenizer::IsSpecial(int32_t id) const { return id >= 0 && id < vocab_size() && impl_->special[id]; }

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_token.size()); }

}  // namespace cuda_agent::tokenizer
