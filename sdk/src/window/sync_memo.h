// Step 2's memo (orbit/sync.h): what rendering each prefix of a message list gave, kept for the lists that
// follow it. An agent's next request is its last list and a few more messages, so its prefixes are that
// list's prefixes, rendered already: with the memo, a sync renders only the prefixes past the longest list it
// knows (and those whose text it does not keep), instead of every prefix of the list, which is quadratic in
// the number of messages.
//
// Why the memo gives what rendering gives. A rendering is a function of the template (ChatTemplate::key), the
// variables (tools, extra) and the messages alone when the template is ChatTemplate::deterministic(); the
// memo's keys hash exactly those, so a list's first m messages hash to a key the memo holds only if an
// earlier list had the same first m messages under the same template and variables. For that earlier list
// (whose whole rendering is K) the memo keeps K and, per prefix i < m, whether rendering it was refused, gave
// K's first `length` bytes, or gave some other text. Against the new list's rendering T, with c the length of
// the common prefix of K and T: a refused prefix is refused again; a prefix that was K[0, length) is a prefix
// of T exactly when length <= c; the m-message prefix (K itself) is one exactly when |K| <= c; the others
// (other text, and the prefixes past m) are rendered. Those three facts are all step 2 reads of a prefix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "orbit/common/sha256.h"
#include "orbit/runtime/chat_template.h"

namespace orbit::detail {

// What rendering a list's first i messages gave, against the rendering of the whole list.
struct PrefixRender {
  enum class Kind : uint8_t {
    kRefused,  // the template threw (orbit::Error) on the shorter list
    kPrefix,   // its text is the whole rendering's first `length` bytes
    kOther,    // some other text
  };
  Kind kind = Kind::kOther;
  std::size_t length = 0;  // kPrefix: the text's length in bytes
};

// The renderings of one list of n messages.
struct ListRenders {
  std::string text;                    // the whole list rendered without the generation prompt
  std::vector<PrefixRender> prefixes;  // [i - 1]: its first i messages, 0 < i < n
  std::size_t bytes() const { return text.size() + prefixes.size() * sizeof(PrefixRender) + 128; }
};

// A bounded map from a list's key to what a memo keeps for that list (`Value`, with bytes()), least recently
// used dropped first: the cuts memo (ListRenders) and the encodings memo (ListEncodings, sync_encode.h).
// Thread-safe: every call takes its lock; values are immutable once put.
template <class Value>
class ListMemo {
 public:
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 20;  // Σ Value::bytes()
  static constexpr std::size_t kMaxEntries = 4096;

  // The value under `key`, now the most recently used; null when the memo has none.
  std::shared_ptr<const Value> get(const Sha256::Digest& key) {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  // The longest list the memo knows among `keys` (keys[m - 1]: the key of a list's first m messages): m and
  // its value; {0, null} when it knows none.
  std::pair<std::size_t, std::shared_ptr<const Value>> longest(const std::vector<Sha256::Digest>& keys) {
    for (std::size_t m = keys.size(); m > 0; --m) {
      if (std::shared_ptr<const Value> v = get(keys[m - 1])) return {m, std::move(v)};
    }
    return {0, nullptr};
  }
  // Keeps `value` under `key`; a key the memo holds keeps its value (the same list gives the same value), or
  // takes `value` instead when `replace` (a key naming the latest of several lists). A value over kMaxBytes is
  // not kept. A value kept under two keys counts twice against kMaxBytes.
  void put(const Sha256::Digest& key, std::shared_ptr<const Value> value, bool replace = false) {
    const std::size_t size = value->bytes();
    if (size > kMaxBytes) return;
    const std::lock_guard<std::mutex> lock(mu_);
    const auto known = index_.find(key);
    if (known != index_.end() && !replace) {
      lru_.splice(lru_.begin(), lru_, known->second);
      return;
    }
    if (known != index_.end()) {
      bytes_ -= known->second->second->bytes();
      lru_.erase(known->second);
      index_.erase(known);
    }
    while (!lru_.empty() && (bytes_ + size > kMaxBytes || lru_.size() >= kMaxEntries)) {
      bytes_ -= lru_.back().second->bytes();
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    lru_.emplace_front(key, std::move(value));
    index_.emplace(key, lru_.begin());
    bytes_ += size;
  }
  void clear() {
    const std::lock_guard<std::mutex> lock(mu_);
    index_.clear();
    lru_.clear();
    bytes_ = 0;
  }

 private:
  struct DigestHash {
    std::size_t operator()(const Sha256::Digest& d) const noexcept {
      std::size_t h = 0;
      for (std::size_t k = 0; k < sizeof h; ++k) h = h << 8 | d[k];
      return h;
    }
  };
  using Lru = std::list<std::pair<Sha256::Digest, std::shared_ptr<const Value>>>;
  std::mutex mu_;
  Lru lru_;  // most recently used first
  std::unordered_map<Sha256::Digest, typename Lru::iterator, DigestHash> index_;
  std::size_t bytes_ = 0;
};

using CutsMemo = ListMemo<ListRenders>;

// The memo Window::sync uses (one per process).
CutsMemo& cuts_memo();

// Where a message starts in the rendered text, and which message it is.
struct TextCut {
  std::size_t text = 0;
  int64_t message = 0;
};

// Whether step 2 reads and keeps the renders of lists (the cuts memo): the template is a function of its inputs
// (ChatTemplate::deterministic) and the memo is on (set_cuts_memo).
bool cuts_memo_applies(const runtime::ChatTemplate& tmpl);

// Step 2 (orbit/sync.h): where each message of `chat` starts in `text`, their rendering by `tmpl` without the
// generation prompt, in order: the end of the rendering of the messages before it, where that rendering is a
// proper prefix of `text` past the last boundary; elsewhere (the template refuses the shorter list, or renders
// it otherwise) the message joins the unit before it and *merged counts it. `keys`: list_keys of the messages
// (empty: none computed). Where cuts_memo_applies and there are keys, reads the prefixes the memo knows and
// keeps this list's renders; the boundaries are the same either way.
std::vector<TextCut> text_cuts(const runtime::ChatTemplate& tmpl, const runtime::PreparedChat& chat,
                               const std::vector<Sha256::Digest>& keys, const std::string& text, int64_t* merged);

// keys[m - 1]: the key of `messages`' first m messages rendered by `tmpl` with `options`' tools_json and
// extra_json (SHA-256 over the template's key, the variables and each message's fields, length-prefixed; the
// error names in the options are not part of it).
std::vector<Sha256::Digest> list_keys(const runtime::ChatTemplate& tmpl, const runtime::ChatRenderOptions& options,
                                      const std::vector<runtime::ChatMessage>& messages);

// A chat template parsed once per source, bos and eos: ChatOptions::chat_template and kPlainChatTemplate
// (a model's own template is parsed once by its engine). Process-wide, at most kMaxParsedTemplates kept,
// least recently used dropped first; thread-safe. Throws what parsing throws (nothing is kept then).
inline constexpr std::size_t kMaxParsedTemplates = 32;
std::shared_ptr<const runtime::ChatTemplate> parsed_template(const std::string& source, const std::string& origin,
                                                             const std::string& bos, const std::string& eos);

}  // namespace orbit::detail
