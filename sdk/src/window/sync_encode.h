// Step 3's incremental encoding (orbit/sync.h): the tokens of a rendering's text segments, reused from the
// list before it. An agent's next list is its last list and a few more messages, so its rendering starts with
// the last rendering (often further: a generation prompt is how the next assistant message starts), and for a
// tokenizer without a pre-tokenizer the whole rendering is one BPE word, encoded anew at every request
// (16.5 ms of a 200-message list's 18-25 ms sync, before this). With the memo, a segment's encode reuses the
// tokens of the earlier list's same segment up to a cut both texts share and encodes only the rest.
//
// Why the tokens are what a whole encode gives. Let K be the earlier segment's text, T the new one, c a byte
// offset with K[0, c) = T[0, c). The tokenizer is prefix-stable (runtime::Tokenizer::prefix_stable), so when
// no token of K straddles c, the tokens of K that end at or before c are exactly encode(T[0, c)); and where
// the safe-cut rule takes c in T (runtime::Tokenizer::encode_rest: no merge can join the characters around c),
// encode(T) is encode(T[0, c)) followed by encode_rest(T, c). So encode_reusing tries the token ends of K at or
// before the texts' common prefix, latest first, and takes the first c that both hold for; T = K[0, c) needs
// no rest. Byte spans come out as encode_with_bytes gives them (tests/cpp/test_sync_encode.cpp compares the two
// over growing, trimmed and edited lists).
//
// A list trimmed or summarized at its start (the oldest turns dropped or replaced, the system prompt kept)
// shares with the earlier one a long run away from both starts: T[p, p + L) = K[q, q + L), where T's message
// starting at p rendered as K's at q did (compared byte for byte: a template may render a message otherwise at
// another index). encode_reusing takes K's tokens for that run too when, for a < e in K (a >= q, e <= q + L) and
// their places a' = a - q + p, e' = e - q + p in T: no token of K straddles e; the rule takes a in K and a' in
// T with the same context (Tokenizer::cut_context); and the rule takes e' in T (or e' = |T|). Then, by
// prefix-stability, K's tokens up to e are encode(K[0, e)), which the rule at a splits into encode(K[0, a))
// and encode_rest(K[0, e), a): K's tokens between a and e; the same context and K[a, e) = T[a', e') make those
// encode_rest(T[0, e'), a'), bytes shifted; so encode(T) is encode(T[0, a')) (itself reusing K's tokens before
// the common prefix, as above), K's tokens between a and e, and encode_rest(T, e'). Both rules are needed: K's
// tokens at a are those of K's left context unless no merge joins across a in either text. A list edited in
// several places shares several runs; encode(T[0, a')) is then the same argument over the shorter text T[0, a')
// with the runs before a' (the rule took a' in T, so encode_rest(T[0, a'), e1') is what comes between the runs),
// and every run whose cuts pass is taken.
//
// The memo finds K by the list's key (a list that grew); a list whose key it does not know (one trimmed or
// summarized at its start) takes the latest list encoded with the same first message, tokenizer, template
// and variables (an alias in the memo), and one whose first message changed too (a system prompt rewritten at
// every request) the latest encoded with the same second message, else the latest with the same tokenizer,
// template and variables (more aliases, latest_keys): its segment shares with K the run that starts at its
// second message, found as a trimmed list's is. A list whose tools changed (any_variables_key: the latest with its
// last messages under its template whatever the variables) shares the text before the tools block as a common
// prefix and the messages after it as runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/common/sha256.h"
#include "orbit/runtime/tokenizer.h"
#include "window/sync_memo.h"

namespace orbit::detail {

// One text segment as step 3 encoded it: the text (the last segment with the generation prompt's text after
// it, when tail_with_prompt encoded it so) and its tokens with their bytes.
struct SegmentEncoding {
  std::string text;
  runtime::Encoding tokens;
};

// The encodings of one list's text segments, in text order.
struct ListEncodings {
  std::vector<SegmentEncoding> segments;
  std::vector<Sha256::Digest> messages;  // [i]: message i's own key (ListKeys::messages), as put_encodings keeps
  // What it holds in memory: its containers' capacities (what they allocated, not only what they use), itself,
  // and 128 bytes for the memo's list and index nodes and the shared_ptr's block.
  std::size_t bytes() const {
    std::size_t n = 128 + sizeof(ListEncodings) + messages.capacity() * sizeof(Sha256::Digest) +
                    segments.capacity() * sizeof(SegmentEncoding);
    for (const SegmentEncoding& s : segments)
      n += s.text.capacity() + s.tokens.ids.capacity() * sizeof(int64_t) +
           s.tokens.bytes.capacity() * sizeof(runtime::TokenBytes);
    return n;
  }
};

// The memo of encodings (one per process), keyed by a list's key (list_keys) and the tokenizer (MemoKey), and
// naming by aliases the latest list encoded by that tokenizer by each of latest_keys (its first message, its
// second, its template and variables).
using EncodeMemo = ListMemo<ListEncodings>;
EncodeMemo& encode_memo();

// Keeps `made`, the encodings of the list with keys `keys` (list_keys; not empty) by `tok`, with its messages'
// keys, under its key and as the latest by each of latest_keys and its anchors (anchor_messages; aliases:
// counted once against the memo's bytes).
void put_encodings(const ListKeys& keys, const runtime::Tokenizer& tok, std::shared_ptr<ListEncodings> made);

// Whether step 3 encodes incrementally for `tok`: prefix-stable, and the switch (set_incremental_encode) on.
bool encodes_incrementally(const runtime::Tokenizer& tok);

// The encodings the memo holds, by `tok`, of the lists step 2 read (`chose`, from text_cuts: the longest it knew,
// else the latest it chose); where step 2 read none or this memo lacks them (step 2's memo off, or the list
// dropped from this memo only), of the longest list among `keys` (list_keys of this list), else of the latest
// list named by one of latest_keys or this list's anchors that holds the most of its messages (latest_list,
// sync_latest.h); null when it holds none. Any list gives the same tokens (the texts are compared).
std::shared_ptr<const ListEncodings> known_encodings(const ListKeys& keys, const runtime::Tokenizer& tok,
                                                     const ListChoice& chose = {});

// tok.encode_with_bytes(text), reusing `known`'s tokens (null: none) up to the latest cut the header's argument
// allows, and for every run the texts share further on (found at `starts`, where messages start in `text`, in
// increasing order: at each start past the last run, the longest, at least kMinRunBytes long); counts the
// reused tokens (tokens_reused_so_far). `tok` must be prefix-stable.
inline constexpr std::size_t kMinRunBytes = 64;
runtime::Encoding encode_reusing(const runtime::Tokenizer& tok, std::string_view text, const SegmentEncoding* known,
                                 const std::vector<std::size_t>& starts = {});

}  // namespace orbit::detail
