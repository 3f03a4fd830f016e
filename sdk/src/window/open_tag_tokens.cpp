// The tokens that can keep a block's open string possible (open_tag_tokens.h).
#include "window/open_tag_tokens.h"

#include <algorithm>
#include <mutex>
#include <string_view>
#include <unordered_set>

#include "orbit/common/error.h"

namespace orbit::detail {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// One of `a` and `b` is a prefix of the other.
bool prefix_either_way(std::string_view a, std::string_view b) {
  const std::size_t n = std::min(a.size(), b.size());
  return a.substr(0, n) == b.substr(0, n);
}

bool listed(std::string_view bytes, std::string_view open) {
  if (bytes.empty()) return false;
  std::size_t space = 0;
  while (space < bytes.size() && is_space(bytes[space])) ++space;
  if (prefix_either_way(bytes.substr(space), open)) return true;
  for (std::size_t k = 1; k < open.size(); ++k) {
    if (prefix_either_way(bytes, open.substr(k))) return true;
  }
  return false;
}

OpenTagTokens compute(const TokenVocabulary& vocabulary, const std::string& open) {
  OpenTagTokens out;
  for (int64_t id = 0; id < vocabulary.size(); ++id) {
    const std::optional<std::string>& bytes = vocabulary.bytes(id);
    if (bytes && listed(*bytes, open)) out.later.emplace_back(id, *bytes);
  }
  std::unordered_set<int64_t> apart;  // the tokens whose bytes differ at the text's start
  for (const auto& [id, bytes] : vocabulary.at_start()) {
    apart.insert(id);
    if (bytes && listed(*bytes, open)) out.first.emplace_back(id, *bytes);
  }
  for (const auto& entry : out.later) {
    if (apart.count(entry.first) == 0) out.first.push_back(entry);
  }
  std::sort(out.first.begin(), out.first.end());
  return out;
}

struct OpenTagCacheEntry {
  std::weak_ptr<const TokenVocabulary> vocabulary;
  const TokenVocabulary* address = nullptr;
  std::string open;
  std::shared_ptr<const OpenTagTokens> tokens;
};

}  // namespace

std::shared_ptr<const OpenTagTokens> open_tag_tokens(const std::shared_ptr<const TokenVocabulary>& vocabulary,
                                                     const std::string& open) {
  ORBIT_CHECK(vocabulary != nullptr && !open.empty(), "open_tag_tokens: needs a vocabulary and an open string");
  static std::mutex mutex;
  static std::vector<OpenTagCacheEntry> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const OpenTagCacheEntry& e : cache) {
      if (e.address == vocabulary.get() && e.open == open && !e.vocabulary.expired()) return e.tokens;
    }
  }
  auto tokens = std::make_shared<const OpenTagTokens>(compute(*vocabulary, open));  // outside the lock
  const std::lock_guard<std::mutex> lock(mutex);
  cache.erase(
      std::remove_if(cache.begin(), cache.end(), [](const OpenTagCacheEntry& e) { return e.vocabulary.expired(); }),
      cache.end());
  cache.push_back({vocabulary, vocabulary.get(), open, tokens});
  return tokens;
}

}  // namespace orbit::detail
