// tokenizer.json normalizers (hf/pipeline.h).
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

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

// Prepends a string to non-empty text.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string text) const override { return text.empty() ? text : prefix_ + text; }

 private:
  std::string prefix_;
};

// Replaces every match of a pattern by a fixed string.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
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
  std::string content_;
};

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
    return std::make_unique<ReplaceNormalizer>(pattern_field(j, where), required_string(j, "content", where));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKD);
  ORBIT_FAIL(file << ": normalizer '" << type
                  << "' is not supported (supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD)");
}

}  // namespace orbit::runtime::hf
