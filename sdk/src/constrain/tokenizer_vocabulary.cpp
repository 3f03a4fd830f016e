// Token bytes read through a tokenizer (tokenizer_vocabulary.h), cached by the tokenizer's content.
#include "constrain/tokenizer_vocabulary.h"

#include <algorithm>
#include <array>
#include <list>
#include <mutex>
#include <optional>
#include <utility>

#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/runtime/tokenizer.h"

namespace orbit::constrain {

namespace {

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The byte "<0xNN>" stands for, or -1.
int byte_piece(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = p[static_cast<std::size_t>(i)];
    const int d = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                           : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// GPT-2's byte-level alphabet backwards: the byte each of its 256 characters stands for (-1: none).
int byte_level_byte(uint32_t code_point) {
  static const std::array<int, 512> table = [] {
    std::array<int, 512> t{};
    t.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<std::size_t>(printable ? b : 256 + extra++)] = b;
    }
    return t;
  }();
  return code_point < table.size() ? table[code_point] : -1;
}

// `piece` read as GPT-2 byte-level characters, or nullopt when it is not made of them.
std::optional<std::string> byte_level_bytes(const std::string& piece) {
  std::string out;
  for (std::size_t i = 0; i < piece.size();) {
    const auto c = static_cast<uint8_t>(piece[i]);
    uint32_t cp = 0;
    std::size_t len = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < piece.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<uint8_t>(piece[i + 1]) & 0x3Fu);
      len = 2;
    } else {
      return std::nullopt;  // the alphabet stops below U+0200
    }
    const int b = byte_level_byte(cp);
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return out;
}

// The bytes of a token whose decoded text is `text` and whose piece is `piece`.
std::optional<std::string> bytes_of(const std::string& text, const std::string& piece) {
  if (text.empty()) return std::nullopt;
  if (text.find(kReplacement) == std::string::npos || piece.find(kReplacement) != std::string::npos) return text;
  if (const int b = byte_piece(piece); b >= 0) return std::string(1, static_cast<char>(b));
  return byte_level_bytes(piece);
}

uint64_t mix(uint64_t h, std::string_view s) {
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  h ^= 0xFF;
  return h * 1099511628211ull;
}

TokenBytes read_bytes(const TokenizerCalls& calls, const std::vector<std::optional<std::string>>& pieces) {
  // An ordinary token to decode after: the last of "a" (not BOS, not special).
  int64_t anchor = -1;
  try {
    const std::vector<int64_t> a = calls.encode("a");
    if (!a.empty()) anchor = a.back();
  } catch (const Error&) {
  }
  TokenBytes out;
  out.text.resize(static_cast<std::size_t>(calls.model_vocab));
  for (int64_t id = 0; id < calls.model_vocab; ++id) {
    const std::optional<std::string>& piece = pieces[static_cast<std::size_t>(id)];
    if (!piece.has_value()) continue;
    const std::string mid = calls.decode({id}, anchor);
    std::optional<std::string> bytes = bytes_of(mid, *piece);
    if (bytes.has_value() && !bytes->empty() && (*bytes)[0] == ' ') {
      const std::string start = calls.decode({id}, calls.bos);
      if (start != mid) {
        std::optional<std::string> at_start;
        if (start == mid.substr(1)) {
          at_start = bytes->substr(1);
        } else if (start.find(kReplacement) == std::string::npos) {
          at_start = start;
        }
        if (at_start.has_value() && at_start->empty()) at_start.reset();
        out.at_start.emplace_back(id, std::move(at_start));
      }
    }
    out.text[static_cast<std::size_t>(id)] = std::move(bytes);
  }
  return out;
}

// The last few vocabularies read, by content key.
struct Registry {
  std::mutex mutex;
  std::list<std::pair<uint64_t, std::shared_ptr<const TokenVocabulary>>> recent;  // most recent first
  static constexpr std::size_t kKeep = 4;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::shared_ptr<const TokenVocabulary> tokenizer_vocabulary(const TokenizerCalls& calls) {
  std::vector<std::optional<std::string>> pieces(static_cast<std::size_t>(calls.model_vocab));
  // The key: every piece, and how a sample of them decodes (two tokenizers with the same pieces may decode
  // them differently).
  uint64_t key = mix(1469598103934665603ull, std::to_string(calls.model_vocab) + "/" + std::to_string(calls.bos));
  for (int64_t id = 0; id < calls.model_vocab; ++id) {
    try {
      pieces[static_cast<std::size_t>(id)] = calls.piece(id);
    } catch (const Error&) {  // an id the tokenizer does not have: it writes nothing
    }
    key = mix(key, pieces[static_cast<std::size_t>(id)].value_or("\xFF<none>"));
    if (id % 97 == 0 && pieces[static_cast<std::size_t>(id)].has_value()) key = mix(key, calls.decode({id}, -1));
  }
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto it = r.recent.begin(); it != r.recent.end(); ++it) {
      if (it->first == key) {
        r.recent.splice(r.recent.begin(), r.recent, it);
        return r.recent.front().second;
      }
    }
  }
  auto vocabulary = TokenVocabulary::from_bytes(read_bytes(calls, pieces));
  std::lock_guard<std::mutex> lock(r.mutex);
  r.recent.emplace_front(key, vocabulary);
  if (r.recent.size() > Registry::kKeep) r.recent.pop_back();
  return vocabulary;
}

namespace {

// The last vocabularies read from runtime tokenizers, by the tokenizer's address: a generate call finds its
// engine's without reading every piece again. An address can be reused by a later tokenizer, so a hit also
// needs the same file, size and a sample of pieces.
struct ByAddress {
  const runtime::Tokenizer* tokenizer = nullptr;
  int64_t model_vocab = 0;
  std::string source;
  uint64_t sample = 0;
  std::shared_ptr<const TokenVocabulary> vocabulary;
};

uint64_t sample_of(const runtime::Tokenizer& tokenizer) {
  uint64_t h = mix(1469598103934665603ull, tokenizer.kind());
  const int64_t n = tokenizer.vocab_size();
  for (int64_t k = 0; k < 16 && n > 0; ++k) {
    const int64_t id = n * k / 16;
    try {
      h = mix(h, tokenizer.piece(id));
    } catch (const Error&) {
    }
  }
  return h;
}

}  // namespace

std::shared_ptr<const TokenVocabulary> tokenizer_vocabulary(const runtime::Tokenizer& tokenizer, int64_t model_vocab) {
  static std::mutex mutex;
  static std::list<ByAddress> recent;  // most recent first
  const uint64_t sample = sample_of(tokenizer);
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto it = recent.begin(); it != recent.end(); ++it) {
      if (it->tokenizer == &tokenizer && it->model_vocab == model_vocab && it->source == tokenizer.source() &&
          it->sample == sample) {
        recent.splice(recent.begin(), recent, it);
        return recent.front().vocabulary;
      }
    }
  }
  TokenizerCalls calls;
  calls.model_vocab = model_vocab;
  calls.bos = tokenizer.bos_id();
  calls.piece = [&](int64_t id) { return tokenizer.piece(id); };
  calls.decode = [&](const std::vector<int64_t>& ids, int64_t previous) { return tokenizer.decode(ids, previous); };
  calls.encode = [&](std::string_view text) { return tokenizer.encode(text, false); };
  auto vocabulary = tokenizer_vocabulary(calls);
  std::lock_guard<std::mutex> lock(mutex);
  recent.push_front({&tokenizer, model_vocab, tokenizer.source(), sample, vocabulary});
  if (recent.size() > Registry::kKeep) recent.pop_back();
  return vocabulary;
}

bool starts_text(const TokenVocabulary& vocabulary, const runtime::Tokenizer& tokenizer, int64_t previous) {
  for (const auto& [id, bytes] : vocabulary.at_start()) {
    const bool ascii = bytes.has_value() &&
                       std::all_of(bytes->begin(), bytes->end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; });
    if (ascii) return tokenizer.decode({id}, previous) == *bytes;
  }
  return false;
}

}  // namespace orbit::constrain

namespace orbit {

std::shared_ptr<const TokenVocabulary> token_vocabulary(const Engine& engine) {
  ORBIT_CHECK(engine.has_tokenizer(), "token_vocabulary: the engine has no tokenizer");
  const ModelInfo info = engine.model_info();
  constrain::TokenizerCalls calls;
  calls.model_vocab = info.vocab_size;
  calls.bos = info.bos_token;
  calls.piece = [&](int64_t id) { return engine.piece(id); };
  calls.decode = [&](const std::vector<int64_t>& ids, int64_t previous) { return engine.detokenize(ids, previous); };
  calls.encode = [&](std::string_view text) { return engine.tokenize(text, false); };
  return constrain::tokenizer_vocabulary(calls);
}

}  // namespace orbit
