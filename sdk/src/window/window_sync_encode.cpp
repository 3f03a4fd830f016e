// Step 3's incremental encoding and its memo (sync_encode.h).
#include "window/sync_encode.h"

#include <algorithm>
#include <atomic>
#include <optional>

#include "window/sync_latest.h"
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

// The header's first argument: K's tokens up to the latest cut in the texts' common prefix (`common` bytes)
// that no token of K straddles and the rule takes in `text`, then encode_rest; else the whole encode.
runtime::Encoding encode_prefix(const runtime::Tokenizer& tok, std::string_view text, const SegmentEncoding& known,
                                std::size_t common) {
  const std::vector<runtime::TokenBytes>& bytes = known.tokens.bytes;
  // j: how many of K's tokens end at or before the common prefix's end (ends never decrease).
  std::size_t j = static_cast<std::size_t>(
      std::partition_point(bytes.begin(), bytes.end(), [&](const runtime::TokenBytes& b) { return b.end <= common; }) -
      bytes.begin());
  for (std::size_t tries = 0; j > 0 && tries < kMaxCutTries; --j, ++tries) {
    const std::size_t c = bytes[j - 1].end;
    if (j < bytes.size() && bytes[j].begin < c) continue;  // the next token holds c's character too
    if (c == text.size()) return joined(known.tokens, j, {});
    if (std::optional<runtime::Encoding> rest = tok.encode_rest(text, c)) {
      return joined(known.tokens, j, std::move(*rest));
    }
  }
  return tok.encode_with_bytes(text);
}

// A run two texts share: text[at, at + length) == K[from, from + length).
struct Run {
  std::size_t at = 0;
  std::size_t from = 0;
  std::size_t length = 0;
};

// How many message starts in a row without a run find_runs looks up in K before it stops, how many of each
// one's places in K it follows, and how many of its bytes it looks for (a message text repeats in an agent's
// list: the place whose run goes furthest is kept).
constexpr std::size_t kRunProbes = 4;
constexpr std::size_t kRunPlaces = 8;
constexpr std::size_t kProbeBytes = 256;

// The longest run at text[p, ...) whose first bytes (up to the next message start, `next`) K holds; length 0:
// none.
Run run_at(std::string_view k, std::string_view text, std::size_t p, std::size_t next) {
  Run best;
  const std::string_view probe = text.substr(p, std::min(next - p, kProbeBytes));
  std::size_t q = k.find(probe);
  for (std::size_t places = 0; q != std::string_view::npos && places < kRunPlaces; ++places) {
    const std::size_t length = common_prefix(k.substr(q), text.substr(p));
    if (length > best.length) best = {p, q, length};
    q = k.find(probe, q + 1);
  }
  return best;
}

// Every run of at least kMinRunBytes at a message start of `text` (`starts`) whose message is not inside the
// common prefix, in text order and apart: at each start past the last run found, the longest; until kRunProbes
// starts in a row have none.
std::vector<Run> find_runs(std::string_view k, std::string_view text, std::size_t common,
                           const std::vector<std::size_t>& starts) {
  std::vector<Run> runs;
  std::size_t misses = 0;
  for (std::size_t i = 0; i < starts.size() && misses < kRunProbes; ++i) {
    const std::size_t p = starts[i];
    const std::size_t next = i + 1 < starts.size() ? starts[i + 1] : text.size();
    if (next <= common || p >= text.size()) continue;
    if (!runs.empty() && p < runs.back().at + runs.back().length) continue;
    const Run run = run_at(k, text, p, next);
    if (run.length >= kMinRunBytes) {
      runs.push_back(run);
      misses = 0;
    } else {
      ++misses;
    }
  }
  return runs;
}

// The first token of K at or after the run's start, at most kMaxCutTries of them, where the rule takes the cut
// in K and at its place in `text` with the same context (the header's second argument); nullopt: none.
std::optional<std::size_t> run_start(const runtime::Tokenizer& tok, std::string_view text, const SegmentEncoding& known,
                                     const Run& run, std::size_t end) {
  const std::vector<runtime::TokenBytes>& kb = known.tokens.bytes;
  auto j = static_cast<std::size_t>(
      std::partition_point(kb.begin(), kb.end(), [&](const runtime::TokenBytes& b) { return b.begin < run.from; }) -
      kb.begin());
  for (std::size_t tries = 0; j < end && tries < kMaxCutTries; ++j, ++tries) {
    const std::size_t a = kb[j].begin;
    if (j > 0 && kb[j - 1].end > a) continue;  // the token before holds a's character too
    const std::optional<int> in_known = tok.cut_context(known.text, a);
    if (in_known && in_known == tok.cut_context(text, a - run.from + run.at)) return j;
  }
  return std::nullopt;
}

std::optional<runtime::Encoding> encode_with_run(const runtime::Tokenizer& tok, std::string_view text,
                                                 const SegmentEncoding& known, const std::vector<Run>& runs,
                                                 std::size_t count);

// encode_with_bytes(text) from runs[0, count) (in text order, apart, each inside `text`): from the last run
// whose cuts pass, and the runs before it for the text before it; else from the common prefix alone.
runtime::Encoding encode_with_runs(const runtime::Tokenizer& tok, std::string_view text, const SegmentEncoding& known,
                                   const std::vector<Run>& runs, std::size_t count) {
  for (; count > 0; --count) {
    if (std::optional<runtime::Encoding> e = encode_with_run(tok, text, known, runs, count)) return std::move(*e);
  }
  return encode_prefix(tok, text, known, common_prefix(known.text, text));
}

// encode_with_bytes(text) from runs[count - 1] (the header's second argument): T's tokens before the run's
// start cut (encode_with_runs of that text with the runs before it: encode(T[0, a')) is the same argument over
// a shorter text), K's tokens from there to the latest end cut the rule takes in `text`, and the rest; nullopt:
// no cuts pass.
std::optional<runtime::Encoding> encode_with_run(const runtime::Tokenizer& tok, std::string_view text,
                                                 const SegmentEncoding& known, const std::vector<Run>& runs,
                                                 std::size_t count) {
  const Run& run = runs[count - 1];
  const std::vector<runtime::TokenBytes>& kb = known.tokens.bytes;
  const std::size_t run_end = run.from + run.length;
  auto je = static_cast<std::size_t>(
      std::partition_point(kb.begin(), kb.end(), [&](const runtime::TokenBytes& b) { return b.end <= run_end; }) -
      kb.begin());
  const std::optional<std::size_t> ja = run_start(tok, text, known, run, je);
  if (!ja) return std::nullopt;
  const std::size_t shift_to = run.at, shift_from = run.from;  // T's byte = K's byte - from + at
  for (std::size_t tries = 0; je > *ja && tries < kMaxCutTries; --je, ++tries) {
    const std::size_t e = kb[je - 1].end;
    if (je < kb.size() && kb[je].begin < e) continue;  // the next token of K holds e's character too
    const std::size_t at_end = e - shift_from + shift_to;
    std::optional<runtime::Encoding> rest = runtime::Encoding{};
    if (at_end < text.size()) rest = tok.encode_rest(text, at_end);
    if (!rest) continue;
    const std::size_t at_start = kb[*ja].begin - shift_from + shift_to;
    runtime::Encoding out = encode_with_runs(tok, text.substr(0, at_start), known, runs, count - 1);
    for (std::size_t t = *ja; t < je; ++t) {
      out.ids.push_back(known.tokens.ids[t]);
      out.bytes.push_back({kb[t].begin - shift_from + shift_to, kb[t].end - shift_from + shift_to});
    }
    tokens_reused.fetch_add(static_cast<int64_t>(je - *ja), std::memory_order_relaxed);
    out.ids.insert(out.ids.end(), rest->ids.begin(), rest->ids.end());
    out.bytes.insert(out.bytes.end(), rest->bytes.begin(), rest->bytes.end());
    return out;
  }
  return std::nullopt;
}

}  // namespace

EncodeMemo& encode_memo() {
  static EncodeMemo memo;
  return memo;
}

bool encodes_incrementally(const runtime::Tokenizer& tok) {
  return tok.prefix_stable() && incremental.load(std::memory_order_relaxed);
}

void put_encodings(const ListKeys& keys, const runtime::Tokenizer& tok, std::shared_ptr<ListEncodings> made) {
  made->messages = keys.messages;
  const MemoKey key{keys.lists.back(), tok.serial()};
  encode_memo().put(key, std::move(made));
  for (const Sha256::Digest& alias : list_aliases(keys)) encode_memo().alias({alias, tok.serial()}, key);
}

std::shared_ptr<const ListEncodings> known_encodings(const ListKeys& keys, const runtime::Tokenizer& tok,
                                                     const ListChoice& chose) {
  if (chose.made) {  // the lists step 2 read, where this memo keeps them too (it keeps what the cuts memo does)
    std::shared_ptr<const ListEncodings> e;
    if (chose.count > 0) e = encode_memo().get({keys.lists[chose.count - 1], tok.serial()});
    if (e == nullptr && chose.latest) e = encode_memo().get({*chose.latest, tok.serial()});
    if (e != nullptr) return e;
  }
  if (auto [count, e] = encode_memo().longest(keys.lists, tok.serial()); e != nullptr) return e;
  return latest_list(encode_memo(), keys, tok.serial()).value;
}

runtime::Encoding encode_reusing(const runtime::Tokenizer& tok, std::string_view text, const SegmentEncoding* known,
                                 const std::vector<std::size_t>& starts) {
  if (known == nullptr || known->tokens.ids.empty()) return tok.encode_with_bytes(text);
  const std::string_view k = known->text;
  const std::size_t common = common_prefix(k, text);
  if (common + kMinRunBytes < k.size()) {  // K goes on past the common prefix: runs may follow
    const std::vector<Run> runs = find_runs(k, text, common, starts);
    if (!runs.empty()) return encode_with_runs(tok, text, *known, runs, runs.size());
  }
  return encode_prefix(tok, text, *known, common);
}

void set_incremental_encode(bool on) { incremental.store(on, std::memory_order_relaxed); }
void clear_encode_memo() { encode_memo().clear(); }
int64_t tokens_reused_so_far() { return tokens_reused.load(std::memory_order_relaxed); }

}  // namespace orbit::detail
