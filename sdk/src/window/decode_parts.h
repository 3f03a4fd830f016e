// Parts of a decode shared by Window::generate's sequences (decode_batch.cpp) and the window's other reads
// (window_read.cpp): growing a past by the rows a forward computed, and exact reuse of a read's query and
// answer (WindowPolicy::reuse_computed).
#pragma once

#include <cstdint>
#include <vector>

#include "orbit/runtime/model.h"
#include "orbit/runtime/reuse.h"
#include "window/window_state.h"

namespace orbit::detail {

// Throws orbit::Error (`what` first) for an empty query, a token outside the vocabulary, or a query whose
// positions after the window's pass the model's limit (it could not be forwarded: not a decode that reached
// the limit, which ends with stop_reason "position_limit").
void check_query(const WindowState& s, const std::vector<int64_t>& query, const char* what);
// The same against a vocabulary of `vocab` tokens.
void check_query_tokens(const std::vector<int64_t>& query, int64_t vocab, const char* what);

// Appends the KV of tokens just run (content at `positions`) to `past` (new tensors: a past shared with
// another sequence is not changed).
void extend_past(runtime::PastKV& past, const runtime::Content& content, const at::Tensor& positions);

// The rows of several forwards' KV, in order, as one content.
runtime::Content concat_contents(const std::vector<runtime::Content>& parts);

// Whether a read's query head is served by exact reuse (reuse_query_head) under `policy`: under
// reuse_computed, except in the exact patch presets (`patch:M:exact`: SurvivorAction::kRecondition with
// MissAction::kForm; the `prefix` baseline keeps a radix cache's reuse of the head). The reused rows
// are the same KV, but the query's last token is then forwarded alone, where the read that stored them
// forwarded it with the head: two valid summation orders where the row counts take different kernels (past
// 16 rows the CPU's products go to BLAS; CUDA's kernels vary with the rows too), so its logits differ in the
// last bits (~1e-7 to 1e-6) and a near-tie can flip a greedy answer. An exact policy forwards the whole query every
// time instead (the generation prompt: a few tokens in a chat), so that a session's sequential repeats of a
// greedy request give the same answer to the bit (tests/python/test_serve_determinism.py).
bool reuses_query_head(const WindowPolicy& policy);

// Exact reuse of a read's query: its leading tokens (all but the last, whose logits the first answer token
// needs) when KV computed behind the window's very KV states holds them (ReuseIndex): loaded onto `past`,
// appended to `head` (their KV, the query's first part), and `input` and `pos` then start after them.
void reuse_query_head(const WindowState& state, const std::vector<int64_t>& query, runtime::PastKV& past,
                      std::vector<int64_t>& input, int64_t& pos, std::vector<runtime::Content>& head);

// Whether keeping a read for reuse needs the KV of the answer's last token (one more decode step at `end`,
// the position after the read's last forward): under exact reuse, once the query's forward ran and gave a
// token (`query_run`), with an answer, within the positions.
bool keep_needs_last(const WindowState& state, const std::vector<int64_t>& answer, bool query_run, int64_t end);

// Exact reuse of a read (WindowPolicy::reuse_computed): the KV of the query, and of the query followed by
// the answer, behind the window's KV states, kept where a live turn with those tokens will look for it.
// `query_kv` is the query's KV (null when its forward did not run: nothing is kept); `turn_kv` the query's
// followed by every answer token's, the last one's included (keep_needs_last's forward; null when it was
// not run: then only the query is kept), so that an appended answer forwards nothing. The store copies
// them: they may be views of buffers that change after the call.
void keep_read_for_reuse(const WindowState& state, const std::vector<int64_t>& query,
                         const std::vector<int64_t>& answer, const runtime::Content* query_kv,
                         const runtime::Content* turn_kv);

}  // namespace orbit::detail
