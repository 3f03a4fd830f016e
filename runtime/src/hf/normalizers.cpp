// tokenizer.json normalizers (hf/pipeline.h).
#include <algorithm>
#include <utility>

#include "src/hf/json_fields.h"
#include "src/hf/pipeline.h"

namespace orbit::runtime::hf {

namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string text) const override {
    for (const auto& p : parts_) text = p->normalize(std::move(text));
    return text;
  }
  bool per_character() const override {
    return std::all_of(parts_.begin(), parts_.end(), [](const auto& p) { return p->per_character(); });
  }
  // Text that stands as prepended() + map_chars(t) meets the next part, which prepends its own and maps both.
  std::string prepended() const override {
    std::string front;
    for (const auto& p : parts_) front = p->prepended() + p->map_chars(std::move(front));
    return front;
  }
  std::string map_chars(std::string text) const override {
    for (const auto& p : parts_) text = p->map_chars(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

// Prepends a string to non-empty text.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string text) const override { return text.empty() ? text : prefix_ + text; }
  bool per_character() const override { return true; }
  std::string prepended() const override { return prefix_; }

 private:
  std::string prefix_;
};

// Replaces every match of a pattern by a fixed string.
// `character`: the pattern when it is a String of one character ("" otherwise); with non-empty content such a
// Replace is per-character.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content, std::string character)
      : pattern_(std::move(pattern)), content_(std::move(content)), character_(std::move(character)) {}
  bool per_character() const override { return !character_.empty() && !content_.empty(); }
  // Valid UTF-8 holds an encoded character only at character boundaries, so a byte search finds exactly
  // the matches of the literal pattern.
  std::string map_chars(std::string text) const override {
    if (character_.empty()) return normalize(std::move(text));  // not per-character: never asked
    std::string out;
    size_t last = 0;
    for (size_t at = text.find(character_); at != std::string::npos; at = text.find(character_, last)) {
      out.append(text, last, at - last);
      out += content_;
      last = at + character_.size();
    }
    out.append(text, last, std::string::npos);
    return out;
  }
  std::string normalize(std::string text) const override {
    std::string out;
    size_t last = 0;
    for (const auto& [b, e] : pattern_.find_all(text)) {
      out.append(text, last, b - last);
      out += content_;
      last = e;
    }
    out.append(text, last, std::string::npos);
    return out;
  }

 private:
  Regex pattern_;
  std::string content_, character_;
};

// The pattern of a Replace when it is a String of exactly one character, else "".
std::string single_character(const nlohmann::json& j) {
  const nlohmann::json& p = j["pattern"];
  if (!p.contains("String") || !p["String"].is_string()) return "";
  const std::string s = p["String"].get<std::string>();
  return !s.empty() && is_valid_utf8(s) && utf8_length(static_cast<unsigned char>(s[0])) == s.size() ? s : "";
}

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string normalize(std::string text) const override { return normalize_unicode(text, form_); }

 private:
  NormalForm form_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& file) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, file, "normalizer");
  const std::string where = file + ": normalizer " + type;
  if (type == "Sequence") {
    ORBIT_CHECK(j.contains("normalizers") && j["normalizers"].is_array(), where << ": 'normalizers' is not a list");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& part : j["normalizers"]) parts.push_back(make_normalizer(part, file));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(required_string(j, "prepend", where));
  if (type == "Replace") {
    Regex pattern = pattern_field(j, where);
    // Hugging Face's tokenizers put the content at every empty match (between every two characters for ""):
    // not done here, so refused rather than encoding otherwise.
    ORBIT_CHECK(!pattern.search(""), where << ": a Replace pattern that matches the empty string is not supported");
    return std::make_unique<ReplaceNormalizer>(std::move(pattern), required_string(j, "content", where),
                                               single_character(j));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKD);
  ORBIT_FAIL(file << ": normalizer '" << type
                  << "' is not supported (supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD)");
}

}  // namespace orbit::runtime::hf
