// Hugging Face tokenizer.json: loading and the encode/decode pipeline (orbit/runtime/hf_tokenizer.h).
#include "orbit/runtime/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "src/cut_pairs.h"
#include "src/hf/added_tokens.h"
#include "src/hf/bpe.h"
#include "src/hf/json_fields.h"
#include "src/hf/pipeline.h"

namespace orbit::runtime {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ORBIT_CHECK(in.good(), path.string() << ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  ORBIT_CHECK(!in.bad(), path.string() << ": read error");
  return text.str();
}

// Bounded nesting (parse_json_input): the component readers recurse into sequences.
json parse_object(std::string_view text, const std::string& origin) {
  json j = parse_json_input(text.data(), text.data() + text.size(), origin);
  ORBIT_CHECK(j.is_object(), origin << ": not a JSON object");
  return j;
}

// A token named in tokenizer_config.json: a string, or an object with "content".
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// The ids a post-processor puts before and after a single sequence.
struct Wrapping {
  std::vector<int64_t> before, after;
};

void append_template_ids(const json& j, const std::string& where, Wrapping& w) {
  ORBIT_CHECK(j.contains("single") && j["single"].is_array(), where << ": 'single' is not a list");
  bool seen_sequence = false;
  for (const json& item : j["single"]) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    ORBIT_CHECK(
        item.contains("SpecialToken") && item["SpecialToken"].contains("id") && item["SpecialToken"]["id"].is_string(),
        where << ": template item " << item.dump() << " is neither Sequence nor SpecialToken");
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    ORBIT_CHECK(j.contains("special_tokens") && j["special_tokens"].contains(name),
                where << ": special token '" << name << "' is not in 'special_tokens'");
    const json& special = j["special_tokens"][name];
    ORBIT_CHECK(special.contains("ids") && special["ids"].is_array(),
                where << ": special token '" << name << "' has no list 'ids'");
    for (const json& id : special["ids"]) {
      ORBIT_CHECK(id.is_number_integer(), where << ": special token '" << name << "': an id is not an integer");
      (seen_sequence ? w.after : w.before).push_back(id.get<int64_t>());
    }
  }
}

void append_post_processor(const json& j, const std::string& file, Wrapping& w) {
  if (j.is_null()) return;
  const std::string type = hf::type_of(j, file, "post_processor");
  const std::string where = file + ": post_processor " + type;
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    ORBIT_CHECK(j.contains("processors") && j["processors"].is_array(), where << ": 'processors' is not a list");
    for (const json& p : j["processors"]) append_post_processor(p, file, w);
    return;
  }
  if (type == "TemplateProcessing") return append_template_ids(j, where, w);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    // Each is [token, id].
    for (const char* key : {"cls", "sep"}) {
      ORBIT_CHECK(j.contains(key) && j[key].is_array() && j[key].size() == 2 && j[key][1].is_number_integer(),
                  where << ": '" << key << "' is not a [token, id] pair");
    }
    w.before.push_back(j["cls"][1].get<int64_t>());
    w.after.push_back(j["sep"][1].get<int64_t>());
    return;
  }
  ORBIT_FAIL(file << ": post_processor '" << type
                  << "' is not supported (supported: TemplateProcessing, RobertaProcessing, BertProcessing, "
                     "ByteLevel, Sequence)");
}

class HfTokenizerImpl final : public HfTokenizer {
 public:
  HfTokenizerImpl(const fs::path& file, const json& j, const json& config);

  std::vector<int64_t> encode(std::string_view text, bool bos) const override;
  std::string decode(const std::vector<int64_t>& ids, int64_t previous) const override;
  std::string decode_ids(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;
  bool is_special(int64_t id) const override { return special_ids_.count(id) > 0; }
  std::string piece(int64_t id) const override { return token_of(id); }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t bos_id() const override { return bos_; }
  int64_t eos_id() const override { return eos_; }
  std::string kind() const override { return "huggingface"; }
  std::string source() const override { return source_; }
  bool prefix_stable() const override { return prefix_stable_; }
  CacheUsage cache_usage() const override {
    return {static_cast<int64_t>(model_->words_cached()), static_cast<int64_t>(model_->bytes_cached()),
            static_cast<int64_t>(model_->cache_words()),
            model_->cache_words() > 0 ? static_cast<int64_t>(hf::BpeModel::kCacheBytes) : 0};
  }
  Encoding encode_with_bytes(std::string_view text) const override;
  std::optional<Encoding> encode_rest(std::string_view text, std::size_t at) const override;
  std::optional<int> cut_context(std::string_view text, std::size_t at) const override;

 private:
  void read_added_tokens(const json& j);
  void read_specials(const json& j, const json& config);
  std::optional<int64_t> token_to_id(const std::string& token) const;
  const std::string& token_of(int64_t id) const;
  void encode_piece(const std::string& text, bool at_start, std::vector<int64_t>& out) const;
  bool find_prefix_stable() const;
  void encode_piece_bytes(std::string_view piece, std::size_t base, bool prepend, Encoding& out) const;
  bool separates(std::string_view text, std::size_t at) const;

  std::string source_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::unique_ptr<hf::BpeModel> model_;
  std::vector<hf::AddedToken> added_;
  std::unordered_map<std::string, int64_t> added_ids_;
  std::unordered_map<int64_t, size_t> added_by_id_;
  std::unordered_set<int64_t> special_ids_;
  std::unique_ptr<hf::AddedTokenMatcher> raw_matcher_, normalized_matcher_;
  CharPairs raw_pairs_, normalized_pairs_;  // adjacent characters of the added tokens' patterns (separates)
  Wrapping wrapping_;
  int64_t vocab_size_ = 0, bos_ = -1, eos_ = -1;
  bool prefix_stable_ = false;
};

HfTokenizerImpl::HfTokenizerImpl(const fs::path& file, const json& j, const json& config) : source_(file.string()) {
  ORBIT_CHECK(j.contains("model"), source_ << ": no 'model'");
  model_ = hf::BpeModel::from_json(j["model"], source_);
  normalizer_ = hf::make_normalizer(j.value("normalizer", json()), source_);
  pre_tokenizer_ = hf::make_pre_tokenizer(j.value("pre_tokenizer", json()), source_);
  decoder_ = hf::make_decoder(j.value("decoder", json()), source_);
  read_added_tokens(j);
  read_specials(j, config);
  prefix_stable_ = find_prefix_stable();
}

// encode(text, false) is prefix-stable (Tokenizer::prefix_stable) when each stage keeps it, for a prefix
// text[0, c) that no token straddles:
//   - added tokens, raw and normalized: leftmost-longest matching scans the prefix as it scans the text up
//     to c (a match of the prefix is a match of the text; the text's match at a position is the longest
//     and, ending at or before c, fits the prefix), and a match past c straddles c. lstrip, rstrip and
//     single_word look at the text around a match, which a prefix cuts: any of them refuses;
//   - the normalizer: per-character (hf/pipeline.h), so the prefix's last piece normalizes to a prefix of
//     the text's piece, ending at the end of c's character before it; every other one refuses;
//   - no pre-tokenizer: the normalized piece is one word, and a pre-tokenizer's split may look ahead;
//   - the BPE model: BpeModel::prefix_stable, on the word's prefix.
bool HfTokenizerImpl::find_prefix_stable() const {
  if (pre_tokenizer_ || (normalizer_ && !normalizer_->per_character()) || !model_->prefix_stable()) return false;
  return std::none_of(added_.begin(), added_.end(),
                      [](const hf::AddedToken& a) { return a.lstrip || a.rstrip || a.single_word; });
}

void HfTokenizerImpl::read_added_tokens(const json& j) {
  // Ids as the Rust library assigns them: the model's id of the content, else the next id past the model's
  // vocabulary (the "id" written in the file is not consulted there either).
  int64_t next_id = model_->size();
  const std::string added = source_ + ": added_tokens";
  for (const json& t : j.value("added_tokens", json::array())) {
    hf::AddedToken a;
    a.content = hf::required_string(t, "content", added);
    if (a.content.empty() || added_ids_.count(a.content)) continue;
    a.special = hf::bool_field(t, "special", false, added);
    a.normalized = hf::bool_field(t, "normalized", !a.special, added);
    a.lstrip = hf::bool_field(t, "lstrip", false, added);
    a.rstrip = hf::bool_field(t, "rstrip", false, added);
    a.single_word = hf::bool_field(t, "single_word", false, added);
    const std::optional<int64_t> in_model = model_->token_to_id(a.content);
    a.id = in_model ? *in_model : next_id++;
    added_ids_[a.content] = a.id;
    added_by_id_[a.id] = added_.size();
    if (a.special) special_ids_.insert(a.id);
    added_.push_back(a);
  }
  vocab_size_ = std::max({model_->id_bound(), model_->size(), next_id});
  for (const hf::AddedToken& a : added_) vocab_size_ = std::max(vocab_size_, a.id + 1);
  std::vector<hf::AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  // The Rust library lists special tokens before the others; with leftmost-longest matching only equal
  // contents could tell the order apart, and contents are unique.
  for (const hf::AddedToken& a : added_) {
    if (a.normalized) {
      normalized.push_back(a);
      normalized_patterns.push_back(normalizer_ ? normalizer_->normalize(a.content) : a.content);
    } else {
      raw.push_back(a);
      raw_patterns.push_back(a.content);
    }
  }
  for (const std::string& p : raw_patterns) raw_pairs_.add_adjacent(p);
  for (const std::string& p : normalized_patterns) normalized_pairs_.add_adjacent(p);
  raw_matcher_ = std::make_unique<hf::AddedTokenMatcher>(raw, raw_patterns);
  normalized_matcher_ = std::make_unique<hf::AddedTokenMatcher>(normalized, normalized_patterns);
}

void HfTokenizerImpl::read_specials(const json& j, const json& config) {
  append_post_processor(j.value("post_processor", json()), source_, wrapping_);
  const auto id_of = [&](const char* key) -> int64_t {
    const std::optional<std::string> name = config_token(config, key);
    if (!name) return -1;
    const std::optional<int64_t> id = token_to_id(*name);
    return id ? *id : -1;
  };
  bos_ = id_of("bos_token");
  eos_ = id_of("eos_token");
  if (bos_ < 0 && !wrapping_.before.empty()) bos_ = wrapping_.before.front();
  if (config.contains("add_bos_token") || config.contains("add_eos_token")) {
    wrapping_ = Wrapping();
    if (config.value("add_bos_token", false)) {
      ORBIT_CHECK(bos_ >= 0, source_ << ": tokenizer_config.json sets add_bos_token but names no known bos_token");
      wrapping_.before.push_back(bos_);
    }
    if (config.value("add_eos_token", false)) {
      ORBIT_CHECK(eos_ >= 0, source_ << ": tokenizer_config.json sets add_eos_token but names no known eos_token");
      wrapping_.after.push_back(eos_);
    }
  }
}

std::optional<int64_t> HfTokenizerImpl::token_to_id(const std::string& token) const {
  const auto it = added_ids_.find(token);
  if (it != added_ids_.end()) return it->second;
  return model_->token_to_id(token);
}

const std::string& HfTokenizerImpl::token_of(int64_t id) const {
  const auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return added_[it->second].content;
  const std::string* token = model_->id_to_token(id);
  ORBIT_CHECK(token != nullptr, source_ << ": token id " << id << " is not in the vocabulary");
  return *token;
}

void HfTokenizerImpl::encode_piece(const std::string& text, bool at_start, std::vector<int64_t>& out) const {
  const std::string normalized = normalizer_ ? normalizer_->normalize(text) : text;
  for (const hf::TextSplit& s : normalized_matcher_->split(normalized)) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    std::vector<hf::Piece> pieces{{normalized.substr(s.begin, s.end - s.begin), at_start && s.begin == 0}};
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
    for (const hf::Piece& p : pieces) model_->tokenize(p.text, out);
  }
}

std::vector<int64_t> HfTokenizerImpl::encode(std::string_view text, bool bos) const {
  ORBIT_CHECK(hf::is_valid_utf8(text), source_ << ": the text to encode is not valid UTF-8");
  std::vector<int64_t> ids;
  if (bos) ids = wrapping_.before;
  for (const hf::TextSplit& s : raw_matcher_->split(text)) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      encode_piece(std::string(text.substr(s.begin, s.end - s.begin)), s.begin == 0, ids);
    }
  }
  if (bos) ids.insert(ids.end(), wrapping_.after.begin(), wrapping_.after.end());
  return ids;
}

// encode_piece of a prefix-stable tokenizer (no pre-tokenizer) on `piece`, the text's bytes from `base`, with
// each token's bytes. The normalized text is built as the per-character normalizer defines it, each of its
// bytes knowing the character of `piece` it came from (what is prepended belongs to the first character).
// `prepend` false: `piece` continues a piece that started before it (encode_rest), so nothing is prepended.
void HfTokenizerImpl::encode_piece_bytes(std::string_view piece, std::size_t base, bool prepend, Encoding& out) const {
  std::string normalized = normalizer_ && prepend ? normalizer_->prepended() : std::string();
  std::vector<std::size_t> owner(normalized.size(), 0);  // normalized byte -> its character's first byte
  for (std::size_t i = 0; i < piece.size();) {
    const std::size_t n = hf::utf8_length(static_cast<unsigned char>(piece[i]));
    std::string mapped(piece.substr(i, n));
    if (normalizer_) mapped = normalizer_->map_chars(std::move(mapped));
    normalized += mapped;
    owner.insert(owner.end(), mapped.size(), i);
    i += n;
  }
  const auto bytes_of = [&](std::size_t begin, std::size_t end) {  // normalized [begin, end), not empty
    const std::size_t last = owner[end - 1];
    return TokenBytes{base + owner[begin], base + last + hf::utf8_length(static_cast<unsigned char>(piece[last]))};
  };
  std::vector<hf::BpeModel::Bytes> at;
  for (const hf::TextSplit& s : normalized_matcher_->split(normalized)) {
    if (s.id >= 0) {
      out.ids.push_back(s.id);
      out.bytes.push_back(bytes_of(s.begin, s.end));
      continue;
    }
    at.clear();
    model_->tokenize(std::string_view(normalized).substr(s.begin, s.end - s.begin), out.ids, &at);
    for (const hf::BpeModel::Bytes& a : at) out.bytes.push_back(bytes_of(s.begin + a.begin, s.begin + a.end));
  }
}

Encoding HfTokenizerImpl::encode_with_bytes(std::string_view text) const {
  ORBIT_CHECK(prefix_stable_, source_ << ": encode_with_bytes: the tokenizer is not prefix-stable (it has a "
                                         "pre-tokenizer, a normalizer that is not per-character, or another "
                                         "condition of Tokenizer::prefix_stable fails), so it reports no bytes");
  ORBIT_CHECK(hf::is_valid_utf8(text), source_ << ": the text to encode is not valid UTF-8");
  Encoding out;
  for (const hf::TextSplit& s : raw_matcher_->split(text)) {
    if (s.id >= 0) {
      out.ids.push_back(s.id);
      out.bytes.push_back({s.begin, s.end});
    } else {
      encode_piece_bytes(text.substr(s.begin, s.end - s.begin), s.begin, true, out);
    }
  }
  return out;
}

// The safe-cut rule (orbit/runtime/tokenizer.h) at a character boundary `at`: no added token matched in the
// raw text holds the raw characters around it side by side, none matched in the normalized text holds them
// as the normalizer maps them (the last of the left one's mapping, the first of the right one's: what stands
// side by side in a normalized piece that runs across `at`), and the model merges nothing across them.
// Where a raw piece starts at `at` (an added token ends there) nothing runs across it and the checks only
// refuse more than they must.
bool HfTokenizerImpl::separates(std::string_view text, std::size_t at) const {
  if (at == 0 || at >= text.size() || is_utf8_continuation(static_cast<unsigned char>(text[at]))) return false;
  std::size_t begin = at - 1;
  while (begin > 0 && is_utf8_continuation(static_cast<unsigned char>(text[begin]))) --begin;
  const std::string left(text.substr(begin, at - begin));
  const std::string right(first_char(text.substr(at)));
  if (raw_pairs_.holds(left, right)) return false;
  const std::string mapped_left = normalizer_ ? normalizer_->map_chars(left) : left;
  const std::string mapped_right = normalizer_ ? normalizer_->map_chars(right) : right;
  const std::string_view l = last_char(mapped_left), r = first_char(mapped_right);
  return !normalized_pairs_.holds(l, r) && model_->separates(l, r);
}

// The raw split of the whole text (added tokens are found scanning from its start), then the pieces from `at`
// on: the one running across `at` is normalized from `at` without the prepended text, as its continuation.
std::optional<Encoding> HfTokenizerImpl::encode_rest(std::string_view text, std::size_t at) const {
  if (!prefix_stable_) return std::nullopt;
  ORBIT_CHECK(hf::is_valid_utf8(text), source_ << ": the text to encode is not valid UTF-8");
  if (!separates(text, at)) return std::nullopt;
  Encoding out;
  for (const hf::TextSplit& s : raw_matcher_->split(text)) {
    if (s.end <= at) continue;
    if (s.id >= 0) {
      if (s.begin < at) return std::nullopt;  // an added token across `at`: what the rule rules out
      out.ids.push_back(s.id);
      out.bytes.push_back({s.begin, s.end});
      continue;
    }
    const std::size_t from = std::max(s.begin, at);
    encode_piece_bytes(text.substr(from, s.end - from), from, from == s.begin, out);
  }
  return out;
}

// What encode_rest's pieces from `at` depend on besides the text from `at` (tokenizer.h): whether a raw piece
// starting there gets the prepended text, which is when a piece of the split ends at `at` (an added token; the
// rule keeps one from running across it). Without prepended text nothing else differs.
std::optional<int> HfTokenizerImpl::cut_context(std::string_view text, std::size_t at) const {
  if (!prefix_stable_ || !hf::is_valid_utf8(text) || !separates(text, at)) return std::nullopt;
  bool ends_at = false;
  for (const hf::TextSplit& s : raw_matcher_->split(text)) {
    if (s.id >= 0 && s.begin < at && at < s.end) return std::nullopt;  // as encode_rest refuses it
    ends_at = ends_at || s.end == at;
    if (s.end > at) break;
  }
  const bool prepends = normalizer_ && !normalizer_->prepended().empty();
  return prepends && ends_at ? 1 : 0;
}

std::string HfTokenizerImpl::decode_ids(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    const std::string& token = token_of(id);
    if (skip_special_tokens && is_special(id)) continue;
    tokens.push_back(token);
  }
  if (!decoder_) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  std::string text;
  for (const std::string& part : decoder_->decode_chain(std::move(tokens))) text += part;
  return text;
}

std::string HfTokenizerImpl::decode(const std::vector<int64_t>& ids, int64_t previous) const {
  std::vector<int64_t> kept{previous};  // special tokens produce no text
  for (int64_t id : ids) {
    token_of(id);  // throws for an unknown id
    if (!is_special(id)) kept.push_back(id);
  }
  if (previous < 0 || is_special(previous)) return decode_ids({kept.begin() + 1, kept.end()}, false);
  // The text after `previous`'s own: decoders treat the first token apart (Strip, Metaspace), so it is decoded
  // with `previous` in front and its text removed. Where `previous` ends in a partial character that `ids`
  // complete, the two differ inside that character: the text restarts at that character.
  const std::string before = decode_ids({previous}, false);
  const std::string all = decode_ids(kept, false);
  size_t common = 0;
  while (common < before.size() && common < all.size() && before[common] == all[common]) ++common;
  if (common < before.size()) {
    while (common > 0 && (static_cast<unsigned char>(all[common]) & 0xC0) == 0x80) --common;
  }
  return all.substr(common);
}

std::unique_ptr<HfTokenizer> make_tokenizer(const json& j, const json& config, const std::string& origin,
                                            int64_t expected_vocab) {
  auto tokenizer = std::make_unique<HfTokenizerImpl>(origin, j, config);
  ORBIT_CHECK(expected_vocab <= 0 || tokenizer->vocab_size() <= expected_vocab,
              origin << ": the tokenizer has ids up to " << tokenizer->vocab_size() - 1
                     << ", past the model's vocabulary of " << expected_vocab);
  return tokenizer;
}

}  // namespace

std::unique_ptr<HfTokenizer> parse_hf_tokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                                const std::string& origin, int64_t expected_vocab) {
  const json config =
      config_json.empty() ? json::object() : parse_object(config_json, origin + " (tokenizer_config.json)");
  return make_tokenizer(parse_object(tokenizer_json, origin), config, origin, expected_vocab);
}

std::unique_ptr<HfTokenizer> load_hf_tokenizer(const std::string& path, int64_t expected_vocab) {
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  const json j = parse_object(read_text(file), file.string());
  const fs::path config_path = file.parent_path() / "tokenizer_config.json";
  const json config =
      fs::exists(config_path, ec) ? parse_object(read_text(config_path), config_path.string()) : json::object();
  return make_tokenizer(j, config, file.string(), expected_vocab);
}

}  // namespace orbit::runtime
