// tokenizer.json decoders (hf/pipeline.h).
#include <unordered_map>
#include <utility>

#include "src/hf/json_fields.h"
#include "src/hf/pipeline.h"

namespace orbit::runtime::hf {

namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& p : parts_) tokens = p->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// Maps each token's characters back to the bytes they stand for (a token with a character outside the
// byte alphabet, such as an added token, keeps its own bytes), then reads all bytes as lossy UTF-8.
class ByteLevelDecoder final : public Decoder {
 public:
  ByteLevelDecoder() {
    const std::vector<std::string>& map = byte_to_unicode();
    for (int b = 0; b < 256; ++b) char_to_byte_[utf8_decode(map[b])[0]] = static_cast<char>(b);
  }
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool all = true;
      for (uint32_t cp : utf8_decode(t)) {
        const auto it = char_to_byte_.find(cp);
        if (it == char_to_byte_.end()) {
          all = false;
          break;
        }
        mapped += it->second;
      }
      bytes += all ? mapped : t;
    }
    return {utf8_lossy(bytes)};
  }

 private:
  std::unordered_map<uint32_t, char> char_to_byte_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      size_t last = 0;
      for (const auto& [b, e] : pattern_.find_all(t)) {
        out.append(t, last, b - last);
        out += content_;
        last = e;
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  Regex pattern_;
  std::string content_;
};

// "<0xNN>" tokens become their bytes: a run of them that is valid UTF-8 becomes its text, else one U+FFFD
// per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string run;
    const auto flush = [&] {
      if (run.empty()) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run.size(); ++i) out.emplace_back(kReplacementChar);
      }
      run.clear();
    };
    for (std::string& t : tokens) {
      const int byte = byte_token(t);
      if (byte >= 0) {
        run += static_cast<char>(byte);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }

 private:
  static int byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int value = 0;
    for (int i = 3; i < 5; ++i) {
      const char c = t[i];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                           : -1;
      if (d < 0) return -1;
      value = value * 16 + d;
    }
    return value;
  }
};

class FuseDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    return {all};
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(uint32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) {
      const std::vector<uint32_t> cps = utf8_decode(t);
      size_t begin = 0, end = cps.size();
      while (begin < start_ && begin < cps.size() && cps[begin] == content_) ++begin;
      for (size_t i = 0; i < stop_ && end > begin && cps[end - 1] == content_; ++i) --end;
      std::string out;
      for (size_t i = begin; i < end; ++i) out += utf8_encode(cps[i]);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  uint32_t content_;
  size_t start_, stop_;
};

// The replacement character becomes a space, except in the first token when a prefix was prepended.
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_first)
      : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      size_t pos = 0;
      const std::string& t = tokens[i];
      while (pos < t.size()) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && drop_first_)) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

size_t count_field(const nlohmann::json& j, const char* key, const std::string& where) {
  ORBIT_CHECK(j.contains(key) && j[key].is_number_unsigned(), where << ": field '" << key << "' is not a count");
  return j[key].get<size_t>();
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& file) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, file, "decoder");
  const std::string where = file + ": decoder " + type;
  if (type == "Sequence") {
    ORBIT_CHECK(j.contains("decoders") && j["decoders"].is_array(), where << ": 'decoders' is not a list");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& part : j["decoders"]) parts.push_back(make_decoder(part, file));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(pattern_field(j, where), required_string(j, "content", where));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const std::vector<uint32_t> content = utf8_decode(required_string(j, "content", where));
    ORBIT_CHECK(content.size() == 1, where << ": 'content' must be one character");
    return std::make_unique<StripDecoder>(content[0], count_field(j, "start", where), count_field(j, "stop", where));
  }
  if (type == "Metaspace") {
    const std::string scheme =
        string_field(j, "prepend_scheme", bool_field(j, "add_prefix_space", true, where) ? "always" : "never", where);
    return std::make_unique<MetaspaceDecoder>(string_field(j, "replacement", "\xE2\x96\x81", where), scheme != "never");
  }
  ORBIT_FAIL(file << ": decoder '" << type
                  << "' is not supported (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                     "Metaspace)");
}

}  // namespace orbit::runtime::hf
