// Forwards in pieces: while a ForwardPieces scope is alive on a thread, the prefills a plan runs on that
// thread (an instance's tokens forwarded in context, behind the window being built) go in pieces of at most
// `tokens` tokens, and the scope's `between` is called on that thread between two pieces. A server uses it to
// let other work take the model between the pieces of one request's long sync (orbit serve hands its decode
// batch a step there: chunked prefill).
//
// Which forwards: the critical-path forwards of token ids a plan runs, in Window::apply and every call built
// on it (add_turn, admit, sync, flush, heal, and the repairs a read runs first): an instance's prefill in
// context (ServeActionId::kPrefill, kPrefillTurn, kForm, kReuse's fallback, a stored value's fallback), the rest
// after a reused head (forward_reusing), a token chunk's canonical encode (KvStore::canonical: a chunk not in
// the store, behind nothing) and a token-selective recompute (first-k's and CacheBlend's: pieces of the tokens
// recomputed, each recomputed over the rows the pieces before it wrote); and Window::logits' query forward
// (each piece behind the window and the pieces before it, on a copy of the past: nothing is written). Not in
// pieces: CacheBlend's probe (it runs the first layers only, and a forward's past must hold every layer's rows,
// so its later pieces would need rows of layers it does not compute; it costs (probe layers)/(layers) of the
// instance's forward), an embedding chunk's rows (no token positions to cut at), a decode's query forward
// (generate, generate_n, generate_many: a DecodeBatch step's, which opens the sequence's decode slot and records
// what the query attends to for the planner in that one forward; orbit serve's decode query is the generation
// prompt, a few tokens, the long prompt being the sync's), the measuring reads (disposable, reference_logits,
// loss_by_instance), the background jobs (their own threads).
//
// The result does not depend on the pieces: piece i+1 is forwarded behind the window built so far and pieces
// 0..i (causal attention reads exactly those rows; a recompute's piece reads the earlier pieces' recomputed rows
// in place of their canonical ones, as one forward of them all does), so the KV made (a query's logits) is the
// whole forward's up to float rounding, not bitwise: the kernels block their sums by the rows forwarded
// (test_forward_pieces holds the window's logits within kExactWindowTolerance of the whole forward's: measured
// 1.2e-5 for a query's rows, 5e-6 after a recompute), the tokens counted as forwarded are the same, and the plan
// and its report are the same.
//
// What `between` may do: anything that does not touch the window being applied (or read) or the call's plan, and
// that does not run a forward on this thread (it is called with the window's operation in flight: the build holds
// its fresh pool pages, the plan's chunks (by reference count, so a registry that forgets them meanwhile does
// not free them) and the KV read so far; the window itself is written only after the plan's last step).
// Another thread may use the engine meanwhile (other windows' reads, edits and decode steps; store reads and
// writes): the build's pages are its own until it commits, and another window's pages are not the build's; a
// store value a later step of the plan counted on that is gone by then is handled as when it went between plan
// and apply (the step falls back to a prefill); pages the other work took meanwhile can leave the
// pool too full for a later step's KV: the call is then refused for capacity with the window untouched, as when
// the pool was full before it began. It may throw (orbit::Interrupted, say): the operation then ends as at an
// interruption point (orbit/interrupt.h), nothing committed.
//
// Scopes nest: the innermost is used. tokens <= 0 forwards whole (as without a scope); a null `between` splits
// and calls nothing. Not copyable or movable; destroyed on the thread that made it.
#pragma once

#include <cstdint>
#include <functional>

namespace orbit {

class ForwardPieces {
 public:
  ForwardPieces(int64_t tokens, std::function<void()> between);
  ~ForwardPieces();
  ForwardPieces(const ForwardPieces&) = delete;
  ForwardPieces& operator=(const ForwardPieces&) = delete;

  // The calling thread's innermost scope, or null (then forwards run whole).
  static ForwardPieces* current();
  int64_t tokens() const { return tokens_; }
  // Calls `between` (the SDK, between two pieces); counts the call.
  void between();
  int64_t pieces_split() const { return calls_; }  // calls to between() so far

 private:
  int64_t tokens_;
  std::function<void()> between_;
  int64_t calls_ = 0;
  ForwardPieces* outer_;
};

}  // namespace orbit
