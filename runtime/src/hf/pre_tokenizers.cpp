// tokenizer.json pre-tokenizers (hf/pipeline.h).
#include <algorithm>
#include <utility>

#include "src/hf/json_fields.h"
#include "src/hf/pipeline.h"

namespace orbit::runtime::hf {

namespace {

// GPT-2's split, which the ByteLevel pre-tokenizer applies when use_regex is set.
constexpr const char* kGpt2Split = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  ORBIT_FAIL(where << ": split behavior '" << name << "' is not one of Removed, Isolated, MergedWithPrevious, "
                   << "MergedWithNext, Contiguous");
}

struct Segment {
  size_t begin, end;
  bool is_match;
};

// The text cut at the pattern's matches into alternating segments (NormalizedString::split in the Rust library).
std::vector<Segment> segments(const Regex& pattern, const std::string& text, bool invert) {
  std::vector<Segment> out;
  size_t prev = 0;
  for (const auto& [b, e] : pattern.find_all(text)) {
    if (prev != b) out.push_back({prev, b, invert});
    out.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), invert});
  return out;
}

// Applies a split behavior: which segments survive and which join a neighbour.
std::vector<std::pair<size_t, size_t>> apply_behavior(const std::vector<Segment>& segs, Behavior behavior) {
  std::vector<std::pair<size_t, size_t>> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Segment& s : segs) out.emplace_back(s.begin, s.end);
      break;
    case Behavior::kRemoved:
      for (const Segment& s : segs)
        if (!s.is_match) out.emplace_back(s.begin, s.end);
      break;
    case Behavior::kContiguous:
      for (const Segment& s : segs) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Segment& s : segs) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->begin;
        } else {
          out.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

void split_pieces(std::vector<Piece>& pieces, const Regex& pattern, Behavior behavior, bool invert) {
  std::vector<Piece> out;
  for (const Piece& piece : pieces) {
    for (const auto& [b, e] : apply_behavior(segments(pattern, piece.text, invert), behavior)) {
      if (e > b) out.push_back({piece.text.substr(b, e - b), piece.at_start && b == 0});
    }
  }
  pieces = std::move(out);
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override { split_pieces(pieces, pattern_, behavior_, invert_); }

 private:
  Regex pattern_;
  Behavior behavior_;
  bool invert_;
};

// Optionally a leading space and the GPT-2 split, then every byte as its printable stand-in character.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), split_(kGpt2Split, where) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
    }
    if (use_regex_) split_pieces(pieces, split_, Behavior::kIsolated, false);
    const std::vector<std::string>& map = byte_to_unicode();
    for (Piece& p : pieces) {
      std::string mapped;
      for (unsigned char c : p.text) mapped += map[c];
      p.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  Regex split_;
};

// Spaces become the replacement character, which then starts each piece.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split, const std::string& where)
      : replacement_(std::move(replacement)),
        prepend_(prepend),
        split_(split),
        space_(Regex::literal(" ", where)),
        marker_(Regex::literal(replacement_, where)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      std::string text;
      size_t last = 0;
      for (const auto& [b, e] : space_.find_all(p.text)) {
        text.append(p.text, last, b - last);
        text += replacement_;
        last = e;
      }
      text.append(p.text, last, std::string::npos);
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_start))) {
        text.insert(0, replacement_);
      }
      p.text = std::move(text);
    }
    if (split_) split_pieces(pieces, marker_, Behavior::kMergedWithNext, false);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
  Regex space_, marker_;
};

MetaspacePreTokenizer::Prepend parse_prepend(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("prepend_scheme")) {  // files older than prepend_scheme carry add_prefix_space
    return bool_field(j, "add_prefix_space", true, where) ? MetaspacePreTokenizer::Prepend::kAlways
                                                          : MetaspacePreTokenizer::Prepend::kNever;
  }
  const std::string scheme = required_string(j, "prepend_scheme", where);
  if (scheme == "always") return MetaspacePreTokenizer::Prepend::kAlways;
  if (scheme == "first") return MetaspacePreTokenizer::Prepend::kFirst;
  if (scheme == "never") return MetaspacePreTokenizer::Prepend::kNever;
  ORBIT_FAIL(where << ": prepend_scheme '" << scheme << "' is not one of always, first, never");
}

}  // namespace

const std::vector<std::string>& byte_to_unicode() {
  // GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves; the others, in byte order,
  // take the code points 256, 257, ...
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = utf8_encode(printable ? b : next++);
    }
    return t;
  }();
  return table;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& file) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, file, "pre_tokenizer");
  const std::string where = file + ": pre_tokenizer " + type;
  if (type == "Sequence") {
    ORBIT_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(),
                where << ": 'pretokenizers' is not a list");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& part : j["pretokenizers"]) parts.push_back(make_pre_tokenizer(part, file));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(bool_field(j, "add_prefix_space", true, where),
                                                   bool_field(j, "use_regex", true, where), where);
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(pattern_field(j, where),
                                               parse_behavior(required_string(j, "behavior", where), where),
                                               bool_field(j, "invert", false, where));
  }
  if (type == "Digits") {
    const bool individual = bool_field(j, "individual_digits", false, where);
    return std::make_unique<SplitPreTokenizer>(Regex(R"(\p{N})", where),
                                               individual ? Behavior::kIsolated : Behavior::kContiguous, false);
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(string_field(j, "replacement", "\xE2\x96\x81", where),
                                                   parse_prepend(j, where), bool_field(j, "split", true, where), where);
  }
  ORBIT_FAIL(file << ": pre_tokenizer '" << type
                  << "' is not supported (supported: Sequence, ByteLevel, Split, Digits, Metaspace)");
}

}  // namespace orbit::runtime::hf
