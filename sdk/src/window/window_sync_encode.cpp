// Step 3's incremental encoding and its memo (sync_encode.h).
#include "window/sync_encode.h"

#include <algorithm>
#include <atomic>

#include "window/sync_render.h"

namespace orbit::detail {

namespace {

std::atomic<bool> incremental{true};    // set_incremental_encode
std::atomic<int64_t> tokens_reused{0};  // tokens_reused_so_far

// How many of the earlier text's token ends, latest first, encode_reusing tries as the cut: each try that the
// rule refuses costs a look at two characters, and a text whose every cut is refused (a script whose
// characters all merge) would otherwise try every token.
constexpr std::size_t kMaxCutTries = 64;

// The first `count` tokens of `e`, then `rest`'s.
runtime::Encoding joined(const runtime::Encoding& e, std::size_t count, runtime::Encoding rest) {
  runtime::Encoding out;
  out.ids.reserve(count + rest.ids.size());
  out.bytes.reserve(count + rest.bytes.size());
  out.ids.assign(e.ids.begin(), e.ids.begin() + static_cast<std::ptrdiff_t>(count));
  out.bytes.assign(e.bytes.begin(), e.bytes.begin() + static_cast<std::ptrdiff_t>(count));
  out.ids.insert(out.ids.end(), rest.ids.begin(), rest.ids.end());
  out.bytes.insert(out.bytes.end(), rest.bytes.begin(), rest.bytes.end());
  tokens_reused.fetch_add(static_cast<int64_t>(count), std::memory_order_relaxed);
  return out;
}

}  // namespace

EncodeMemo& encode_memo() {
  static EncodeMemo memo;
  return memo;
}

Sha256::Digest encoding_key(const Sha256::Digest& list, uint64_t tokenizer) {
  Sha256 h;
  h.update("orbit sync encodings v1");
  h.update(list.data(), list.size());
  h.update_u64(tokenizer);
  return h.digest();
}

bool encodes_incrementally(const runtime::Tokenizer& tok) {
  return tok.prefix_stable() && incremental.load(std::memory_order_relaxed);
}

std::shared_ptr<const ListEncodings> known_encodings(const std::vector<Sha256::Digest>& keys,
                                                     const runtime::Tokenizer& tok) {
  for (std::size_t m = keys.size(); m > 0; --m) {
    if (std::shared_ptr<const ListEncodings> e = encode_memo().get(encoding_key(keys[m - 1], tok.serial()))) return e;
  }
  return nullptr;
}

runtime::Encoding encode_reusing(const runtime::Tokenizer& tok, std::string_view text, const SegmentEncoding* known) {
  if (known == nullptr || known->tokens.ids.empty()) return tok.encode_with_bytes(text);
  const std::string& k = known->text;
  const std::vector<runtime::TokenBytes>& bytes = known->tokens.bytes;
  const std::size_t both = std::min(k.size(), text.size());
  const auto common =
      static_cast<std::size_t>(std::mismatch(k.begin(), k.begin() + both, text.begin()).first - k.begin());
  // j: how many of K's tokens end at or before the common prefix's end (ends never decrease).
  std::size_t j = static_cast<std::size_t>(
      std::partition_point(bytes.begin(), bytes.end(), [&](const runtime::TokenBytes& b) { return b.end <= common; }) -
      bytes.begin());
  for (std::size_t tries = 0; j > 0 && tries < kMaxCutTries; --j, ++tries) {
    const std::size_t c = bytes[j - 1].end;
    if (j < bytes.size() && bytes[j].begin < c) continue;  // the next token holds c's character too
    if (c == text.size()) return joined(known->tokens, j, {});
    if (std::optional<runtime::Encoding> rest = tok.encode_rest(text, c)) {
      return joined(known->tokens, j, std::move(*rest));
    }
  }
  return tok.encode_with_bytes(text);
}

void set_incremental_encode(bool on) { incremental.store(on, std::memory_order_relaxed); }
void clear_encode_memo() { encode_memo().clear(); }
int64_t tokens_reused_so_far() { return tokens_reused.load(std::memory_order_relaxed); }

}  // namespace orbit::detail
