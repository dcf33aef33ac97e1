#include "cuda_agent/tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <functional>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "cuda_agent/util/file.h"

namespace cuda_agent::tokenizer {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The GPT-2 pre-tokenizer pattern, used by ByteLevel when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Length of the valid UTF-8 character at `p` (n bytes left), or 0 if invalid;
// `*maximal` is then the length of its longest valid prefix (at least 1).
size_t ValidCharLength(const unsigned char* p, size_t n, size_t* maximal) {
  unsigned char c = p[0];
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  *maximal = 1;
  if (len == 0) return 0;
  for (size_t i = 1; i < len; ++i) {
    if (i >= n) return 0;
    unsigned char b = p[i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    *maximal = i + 1;
  }
  return len;
}

// `text` with each maximal invalid UTF-8 subsequence replaced by one U+FFFD
// (the rule of Rust's from_utf8_lossy, which Hugging Face's decode uses).
std::string ValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0, n = text.size();
  while (i < n) {
    size_t maximal = 1;
    size_t len = ValidCharLength(p + i, n - i, &maximal);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      i += maximal;
    } else {
      out.append(text.data() + i, len);
      i += len;
    }
  }
  return out;
}

size_t CharLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// GPT-2's map of the 256 byte values onto printable characters.
struct ByteMap {
  std::array<std::string, 256> to_char;
  std::unordered_map<std::string, uint8_t> to_byte;
  ByteMap() {
    std::vector<int> printable;
    for (int b = '!'; b <= '~'; ++b) printable.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) printable.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) printable.push_back(b);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool kept = std::find(printable.begin(), printable.end(), b) != printable.end();
      to_char[b] = Utf8(kept ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + extra++));
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& Bytes() {
  static const ByteMap map;
  return map;
}

// A compiled PCRE2 pattern with Unicode properties; shared by threads.
class Regex {
 public:
  static StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return InvalidArgument("regex /" + pattern + "/ at offset " + std::to_string(offset) + ": " +
                             reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    return std::unique_ptr<Regex>(new Regex(code));
  }
  ~Regex() { pcre2_code_free(code_); }

  // [begin, end) byte ranges of the non-empty matches, left to right.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> out;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t offset = 0;
    while (offset < text.size()) {
      int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), offset, PCRE2_NO_UTF_CHECK,
                           md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] == ov[0]) {  // an empty match: step over one character
        offset = ov[0] + CharLength(static_cast<unsigned char>(text[ov[0]]));
        continue;
      }
      out.emplace_back(ov[0], ov[1]);
      offset = ov[1];
    }
    pcre2_match_data_free(md);
    return out;
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

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
