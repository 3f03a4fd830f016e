// Traces: a recorded sequence of window operations, replayed under several policies side by
// side, each step measured for cost (forward tokens, bytes, device bytes, wall time) and fidelity (the
// window against a full re-prefill of the same contents). What `orbit replay` and `orbit make-trace` run.
//
// ---- the file format: JSON, "format": "orbit-trace/1" ------------------------------------------------
//
//   {
//     "format": "orbit-trace/1",
//     "name": "web-small", "description": "...",                       (optional)
//     "probe": {"random_tokens": 4, "seed": 1},                         (optional; the fidelity query)
//     "chunks": [                                                       (named, registered once)
//       {"name": "sys",   "tokens": [1, 365, 1691]},                    explicit token ids
//       {"name": "intro", "text": "Once upon a time", "bos": true},     text (the model's tokenizer)
//       {"name": "page",  "random_tokens": 24, "seed": 5},              uniform ids in [3, vocab)
//       {"name": "story", "sample": 32, "seed": 9,                      sampled from the model after
//                         "prompt": [1], "temperature": 1.0},           `prompt` (default [1])
//       {"name": "frame0", "embeddings": {"grid": [1, 4, 6], "seed": 3, "std": 1.0}}
//                                                                       generated input embeddings, t·h·w
//                                                                       rows of N(0, std²); on M-RoPE models
//                                                                       with the (t, h, w) grid, else plain
//     ],                                                                positions. Optional: "pin": true.
//     "steps": [
//       {"op": "admit",   "chunk": "page" [, "before": "sys"]}         at the tail / before that chunk
//       {"op": "turn",    "tokens": [...]} | {"op": "turn", "random_tokens": 5, "seed": 2}   a live turn
//                         | {"op": "turn", "text": "Max ran to the park."}
//       {"op": "evict",   "chunk": "page"} | {"op": "evict", "turn": 0}   a chunk / the i-th live turn
//                                                                       (0 = the oldest turn in the window)
//       {"op": "slide",   "count": 1}                                    evict the oldest chunk instances
//                                                                       (refused after "place" until a
//                                                                       reorder: place's order is the
//                                                                       policy's; evict by name instead)
//       {"op": "recall",  "chunk": "page" [, "before": "sys"]}         re-admit an evicted chunk
//       {"op": "reorder", "order": ["b", "a", "c"]}                     every chunk in the window, once;
//                                                                       turns keep their slots
//       {"op": "place"}                                                 the planner's cheapest order (per
//                                                                       policy: it follows stored patches)
//       {"op": "fork",    "branch": "spec"}                             fork the current window into a
//                                                                       new branch and continue on it
//       {"op": "switch",  "branch": "main"}                             continue on another live branch
//       {"op": "commit"  [, "branch": "spec"]}                          the branch (default: current)
//                                                                       replaces its parent, which becomes
//                                                                       current if the branch was
//       {"op": "drop",    "branch": "spec"}                             discard a branch (not "main"); if
//                                                                       current, its parent becomes current
//       {"op": "generate", "max_tokens": 8 [, "query": <tokens>] [, "append": true]}
//                                                                       decode after the window (greedy;
//                                                                       query default: the probe), at most
//                                                                       to the model's last position; with
//                                                                       append, query + answer become a
//                                                                       live turn (see replay() below)
//       {"op": "disposable", "chunk": "page" [, "answer_tokens": 4] [, "query": <tokens>]}
//     ]                                                                 Every step may carry "note": "...".
//   }
//
// A <tokens> value (turn contents, a query, the probe) is a token list [1, 2] or an object with exactly
// one of "tokens": [...], "random_tokens": n (+ "seed"), "sample": n (+ "seed", "prompt", "temperature"),
// "text": "..." (+ "bos": true). A chunk or a turn takes the same fields in place of "tokens", e.g.
//   {"name": "intro", "text": "Once upon a time, there was a dog named Max.", "bos": true}
//   {"op": "turn", "text": "Max saw a big red ball."}
// Text is tokenized at replay by the model's tokenizer (Engine::tokenize; BOS only with "bos": true), so a
// text trace needs a model with a tokenizer; replaying it on one without fails naming the field.
// The window starts empty on branch "main". Names are unique; a chunk is in at most one place per branch.
//
// Validation (load_trace / parse_trace / validate_trace) checks the structure and simulates the window
// (which chunks are in it, evicted, which branches live), so a trace that would fail at replay fails at
// load instead: every error is an orbit::Error naming the file, the step index and op, and the field, e.g.
//   "web.json: step 7 (evict): field 'chunk': 'shot3' is not in the window on branch 'main'".
// A key given twice in one object is refused ("web.json: steps[7]: field 'chunk': given twice in one
// object"), as are unknown fields: JSON parsers keep the last value, so one of the two would be dropped unseen.
// Token ids against the vocabulary, embeddings against the model and positions past the model's limit
// are checked at replay (they need the model), with the same naming.
//
// Thread-safety: plain values and free functions; replay() opens its own engines.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "orbit/engine.h"
#include "orbit/policy.h"

namespace orbit {

inline constexpr const char* kTraceFormat = "orbit-trace/1";

// Where a token list comes from.
struct TokenSource {
  enum class Kind { kTokens, kRandom, kSample, kText };
  Kind kind = Kind::kTokens;
  std::vector<int64_t> tokens;     // kTokens
  int64_t count = 0;               // kRandom, kSample: how many tokens
  uint64_t seed = 0;               // kRandom, kSample
  std::vector<int64_t> prompt{1};  // kSample: decoded after this prompt (an empty window)
  double temperature = 1.0;        // kSample
  std::string text;                // kText: UTF-8, tokenized by the model's tokenizer at replay
  bool bos = false;                // kText: BOS first

  static TokenSource explicit_tokens(std::vector<int64_t> tokens);
  static TokenSource random(int64_t count, uint64_t seed);
  static TokenSource from_text(std::string text, bool bos = false);
  bool empty() const { return (kind == Kind::kTokens && tokens.empty()) || (kind == Kind::kText && text.empty()); }
};

// Generated input embeddings for a media chunk (a frame, a screenshot) with a t×h×w grid.
struct EmbeddingSource {
  std::array<int64_t, 3> grid{1, 1, 1};  // (t, h, w); t·h·w rows
  uint64_t seed = 0;
  double std = 1.0;  // rows are N(0, std²) per element
  int64_t rows() const { return grid[0] * grid[1] * grid[2]; }
};

struct TraceChunk {
  std::string name;
  bool embeddings = false;  // EmbeddingSource media; else `tokens`
  TokenSource tokens;
  EmbeddingSource media;
  bool pin = false;
};

enum class TraceOp {
  kAdmit,
  kTurn,
  kEvict,
  kSlide,
  kRecall,
  kReorder,
  kPlace,
  kFork,
  kSwitch,
  kCommit,
  kDrop,
  kGenerate,
  kDisposable,
};
const char* trace_op_name(TraceOp op) noexcept;  // "admit", "turn", ..., "disposable" (the JSON "op")
// True for ops that change the current window's contents (admit, turn, evict, slide, recall, reorder,
// place; generate with append).
bool trace_op_mutates(TraceOp op) noexcept;

struct TraceStep {
  TraceOp op = TraceOp::kAdmit;
  std::string chunk;               // admit, recall, evict, disposable
  std::string before;              // admit, recall: a chunk name in the window; empty = at the tail
  int64_t turn = -1;               // evict: index among the window's live turns (0 = oldest); -1 = none
  int64_t count = 1;               // slide
  std::vector<std::string> order;  // reorder: chunk names
  std::string branch;              // fork, switch, commit (empty = current), drop
  TokenSource tokens;              // turn contents; generate / disposable query (empty = the probe)
  int64_t max_tokens = 8;          // generate
  bool append = false;             // generate
  int64_t answer_tokens = 4;       // disposable
  std::string note;
};

struct Trace {
  std::string format = kTraceFormat;
  std::string name;
  std::string description;
  TokenSource probe = TokenSource::random(4, 1);
  std::vector<TraceChunk> chunks;
  std::vector<TraceStep> steps;
  std::string source;  // the file it was loaded from (for error messages); "" when built in code

  const TraceChunk* find_chunk(const std::string& name) const;  // nullptr when absent
};

// ---- load, validate, save ------------------------------------------------------------------------------
// Each throws orbit::Error naming the file (`source`), step index, op and field on bad input.
Trace load_trace(const std::string& path);
Trace parse_trace(const std::string& json_text, const std::string& source = "<trace>");
void validate_trace(const Trace& trace);  // parse_trace already calls it
std::string trace_to_json(const Trace& trace, int indent = 2);
void save_trace(const Trace& trace, const std::string& path);  // validates, then writes atomically

// ---- generated traces (`orbit make-trace`) ---------------------------------------------------------------
//
//   web    a web agent: a system turn, then per step a screenshot chunk, an action turn and an observation
//          turn; the window keeps the last three screenshots (slide), old turns are evicted to stay within
//          the position budget; every few steps it looks back at an evicted screenshot (recall, later
//          evicted again), reorders the screenshots, or tries an action on a fork (commit or drop)
//   video  a video agent: one clip's frames admitted once, then re-examined under changing prompts: per
//          step a prompt turn and a probe generation, with reorders (the relevant frames moved last),
//          look-backs (a frame evicted and recalled) and speculative forks
//   agent  a tool-using agent: documents / tool results in a sliding window of four, with recalls,
//          reorders, place(), forks and generations appended to the transcript
// (web, video and agent hold random token ids, or with sample_text model-sampled text; they are the
// regression workloads of earlier measurements.)
//
// Agent patterns: story-like TEXT chunks, turns and probe question ({"text": ...}, built from word lists
// and sentence templates, deterministic by seed), the window filled up to the model's positions − 24:
//   browse   a browsing agent: page screens slide over a growing transcript of actions and observations
//            (three pages kept); every 4th step it looks back at an earlier page, then sets it aside
//   coding   a coding tool loop: four files read; per step a tool call and its output, used and dropped;
//            every 3rd step a file is edited (the new version replaces the old one where it was)
//   videoqa  a video QA agent: six frame descriptions held while questions come and go; frames
//            re-examined in a new order (the one asked about moved last), one set aside and brought back
//   fanout   multi-agent fan-out: a shared document set, then per round three sub-agents forked over it,
//            each dropping a document outside its task and working; one is committed, the others dropped
//   rag      RAG re-rank: each turn retrieves five documents of eight (mostly the same, re-scored), held
//            in rank order after the system prompt, then a question and an appended answer
// The most agent steps make_trace() generates (each is several trace steps; a larger trace is a mistake,
// not a workload: it would take minutes and hundreds of MB).
inline constexpr int64_t kMaxTraceSteps = 100000;

struct MakeTraceOptions {
  // web | video | agent, or an agent pattern: browse | coding | videoqa | fanout | rag (above)
  std::string kind = "web";
  int64_t steps = 12;  // agent steps (each expands to several trace steps), [1, kMaxTraceSteps]
  uint64_t seed = 0;
  int64_t max_positions = 512;  // the window stays below ~3/4 of this (agent patterns: this − 24)
  int64_t position_rows = 1;    // 3: media chunks are embeddings with (t, h, w) grids
  int64_t chunk_tokens = 0;     // screenshot / frame / document size; 0 = chosen from max_positions
  bool sample_text = false;     // web/agent only: observations and documents sampled from the model
  // Agent patterns: the tokens the model's tokenizer gives a text (no BOS), so chunk sizes and the window
  // budget are exact (`orbit make-trace` passes the model's). Unset: bytes + 1, an upper bound, so the
  // trace stays within the model's positions but fills fewer of them (texts are grown sentence by
  // sentence to their sizes by this count, so a trace made with and one without it differ).
  std::function<int64_t(const std::string&)> text_tokens;
};
Trace make_trace(const MakeTraceOptions& options);

// ---- replay ----------------------------------------------------------------------------------------------
//
// replay() runs the trace once per policy, each on its own fresh Engine (memory store, the given engine
// options), so policies never share canonicals or patches. Generated chunk contents are resolved once
// (same tokens for every policy). The baselines reprefill, prefix and blind always run too; the
// reprefill baseline runs first, and the tokens it generates at a `generate` step with append are the
// transcript every policy appends (so all windows hold the same contents; each policy's own answer is
// reported with its agreement against that transcript).
//
// Per step: measured cost (Window::apply's report plus wall time around plan + apply), split into the
// critical path (plan + apply, and at a generate or disposable the query tokens its model call forwards:
// what the next token waits for; StepResult::query_forward_tokens) and the background (the canonical encodes
// and patch forming the step queued, run right after it with Engine::run_background, as an agent's idle
// time would; replay engines use BackgroundMode::kDeferred; and Window::idle after every generate step
// (a model call, after which the agent runs the tool it asked for), which heals the window and prepares
// recalls as the policy asks; the step is probed before, on the window the model read), and, when the
// current window is not empty, fidelity after the step: Window::logits(probe) vs
// Window::reference_logits(probe) (a re-prefill of the same window), all rows: mean over rows of
// KL(reference ‖ window) in nats, and the fraction of rows whose top-1 agrees (ties count). Fidelity costs two
// forwards of the window per step and is not counted in any cost.

struct ReplayOptions {
  EngineOptions engine;                          // model path, pool, page size, threads (store_dir is ignored)
  std::vector<std::string> policies{"default"};  // parse_policy specs; baselines are added
  bool baselines = true;                         // add reprefill, prefix and blind (off only for tests/tools)
  bool fidelity = true;                          // measure fidelity after every step
  bool explain = false;                          // keep every step's Plan::describe()
  // After every probed step, each approximate instance's own KL (Window::loss_by_instance over the probe)
  // beside its predicted KL: where the fidelity model errs, by how each instance was served. One more
  // forward of the window and one of the probe per approximate instance, per step; off the timings.
  bool attribute = false;
  // Engine::calibrate() each policy's engine before replaying (fits the cost and fidelity models that
  // `:kl=X` budgets plan with; a few seconds per policy). Off: the models' defaults.
  bool calibrate = false;
  // Engine::calibrate_fidelity() each policy's engine before replaying: the fidelity model fitted on this
  // model, the cost model left at its defaults (deterministic, unlike calibrate). Not with calibrate,
  // which fits the fidelity model too.
  bool calibrate_fidelity = false;
  // Patch-cache capacity for the offline bound (bytes, >= 0; 0: no patch is kept, every demand forms one);
  // none: the engine's host_budget_bytes (the tier the online policy's patches live in).
  std::optional<int64_t> patch_capacity_bytes;
  // The bounded prefix-cache yardsticks' KV budget (tokens); 0 = the replay engine's KV pool in tokens,
  // the memory orbit's windows have.
  int64_t yardstick_tokens = 0;
  // Replay every policy this many times (>= 1), the policies interleaved within each round, and report
  // each step's fastest critical-path and background time. Wall time on a shared machine swings by tens
  // of percent between runs, and the first policy run in a process pays its warm-up; the minimum of a few
  // interleaved runs compares policies on what they cost, not on when they ran. Token counts, fidelity
  // and everything else come from the first round (later rounds skip the fidelity forwards); a later round
  // that computes different token counts fails the replay (the replay is deterministic). Needs calibrate
  // off: calibration fits the cost model from measured times, so rounds could plan differently.
  int timing_repeats = 1;
  // Called before each step (policy index, policy count, step index, step count) — progress reports.
  std::function<void(std::size_t, std::size_t, std::size_t, std::size_t, const std::string&)> progress;
};

inline constexpr double kTop1TieLogits = 1e-4;
// Below this a KL is float noise of an exact window (re-prefill measures ~1e-12), not a loss.
inline constexpr double kKlFloor = 1e-7;

// A reference row whose two largest logits are within this is a near tie: a top-1 miss there is the window
// picking a token the reference nearly picked itself (a probability ratio below 1.11), not overturning a
// clear choice. Replay counts such rows and misses so a top-1 figure can be read (it does not change it).
inline constexpr double kNearTieLogits = 0.1;

// One probe row whose top-1 the window got wrong: how close the reference itself was to the window's pick.
struct Top1Miss {
  int64_t row = 0;        // the probe row
  double margin = 0;      // the reference's logit for its own top-1 minus its logit for the window's top-1 (> 0)
  double kl = 0;          // that row's KL(reference ‖ window), nats
  bool near_tie = false;  // the row is a reference near tie (its top two logits within kNearTieLogits)
};

struct StepFidelity {
  double kl = 0;  // mean over probe rows of KL(reference ‖ window), nats
  // Fraction of rows whose top-1 agrees: the window's argmax is the reference's, or ties with it (its
  // reference logit within kTop1TieLogits of the reference's largest; float noise picks between such).
  double top1 = 0;
  int64_t rows = 0;
  int64_t top1_misses = 0;       // rows whose top-1 disagrees: rows × (1 − top1)
  int64_t near_tie_rows = 0;     // rows whose reference top two logits are within kNearTieLogits
  int64_t near_tie_misses = 0;   // top-1 misses among those rows
  std::vector<Top1Miss> misses;  // every top-1 miss, in row order (top1_misses of them)
};

// How orbit::replay scores a window's logits against the reference's over the same rows: KL, top-1 and the
// near-tie counts above. Throws orbit::Error when the shapes differ.
StepFidelity step_fidelity(const Logits& reference, const Logits& window);

// The tokens one read showed the prefix-cache yardsticks (eval/src/trace_yardstick.h says which steps
// are reads): the prompt is window then query; generated tokens are held afterwards, not forwarded. An
// embedding chunk's rows appear as negative stand-in ids.
struct YardstickRead {
  std::vector<int64_t> window;
  std::vector<int64_t> query;
  std::vector<int64_t> generated;
};

struct StepResult {
  std::size_t index = 0;
  TraceOp op = TraceOp::kAdmit;
  std::string branch;                  // the current branch after the step
  std::string status = "ok";           // "ok", or why the window refused the operation (unchanged then)
  double forward_tokens = 0;           // token-forwards the step computed: critical + background
  double critical_forward_tokens = 0;  // of which on the critical path (plan + apply, and the read's query)
  // Of critical_forward_tokens, the query tokens the step's model call forwarded (0 for other steps).
  // generate: Generation::prompt_forward_tokens: the whole query, or under exact reuse only its last token
  // when KV computed behind the same window holds the rest; never 0, since the first answer token needs the
  // last query token's logits. disposable: the query twice (its two greedy decodes, with and without the
  // instance's conditioning, each forward it whole). The radix yardstick counts the same tokens: a read's
  // query is part of the prompt it forwards, and a model call forwards at least the prompt's last token
  // even when the cache holds it all (planner::PrefixRead::kLogits). So critical_forward_tokens and
  // radix_tokens compare like with like, per read and in total; an executing radix cache (the `prefix`
  // preset) matches radix_tokens read for read on an append-only trace.
  double query_forward_tokens = 0;
  // What the engine's live chunk-granular ledger (planner::PrefixLedger: whole instances, no query or
  // generated tokens) charged for the step (EngineStats::prefix_cache_tokens). Not the radix yardstick.
  double prefix_cache_tokens = 0;
  // The prefix-cache yardsticks at a read (planner/prefix_cache.h; 0 when the step is not a read): prompt
  // tokens (window and query; at a generate or disposable at least the last, as query_forward_tokens
  // above) an SGLang-style token radix cache forwards, bounded by the engine's KV pool
  // (PolicyReplay::yardstick_capacity_tokens) and unbounded, and a vLLM-style 16-token block cache with the
  // same bound.
  double radix_tokens = 0;
  double radix_unbounded_tokens = 0;
  double block_cache_tokens = 0;
  // The same bounded radix cache read only at model calls (generate, disposable), as a server computes a
  // prompt only when a request comes: it never forwards a window an admit, recall or turn left that no call
  // read, nor the tail after each of several edits between two calls (0 when the step is no model call).
  // The honest peer for a saving: radix_tokens charges those reads too, so it can exceed what SGLang forwards.
  double radix_call_tokens = 0;
  std::optional<YardstickRead> yardstick_read;  // absent: not a read
  double background_forward_tokens = 0;         // of which in the background work the step queued
  double heal_forward_tokens = 0;               // of which healing the window after the step (Window::idle)
  double prepare_forward_tokens = 0;            // of which preparing recalls after the step (Window::idle)
  // Of which the fidelity self-check's probes (Window::idle; IdleReport::check_forward_tokens), with the KL
  // it measured (-1: no check) and the engine's fidelity correction after the step.
  double check_forward_tokens = 0;
  double check_kl = -1;
  double fidelity_correction = 1;
  // generate / disposable: tokens generated (disposable: both decodes'); not in forward_tokens, and not
  // counted by the yardsticks either (any engine decodes them)
  double decode_tokens = 0;
  // No cache at all: a mutating step re-prefills the window's tokens after it, a generate or disposable
  // forwards its query (and a generate that appends, the window after it too); else 0
  double full_prefill_tokens = 0;
  int64_t patches_formed = 0;
  int64_t patch_hits = 0;
  int64_t canonicals_encoded = 0;
  int64_t bytes_moved = 0;
  int64_t window_tokens = 0;      // the current window after the step
  int64_t window_bytes = 0;       // KV pages the current window holds
  int64_t device_bytes = 0;       // KV pool bytes in use after the step, every branch (shared pages once)
  int64_t peak_device_bytes = 0;  // max of device_bytes so far in this policy's replay (sampled after
                                  // each step: the transient pages inside one apply are not seen)
  double seconds = 0;             // critical_seconds + background_seconds
  double critical_seconds = 0;    // wall time of plan + apply (generate: the decode)
  double background_seconds = 0;  // wall time of the background work it queued
  double predicted_kl = -1;       // the plan's predicted KL of the window after the step (-1: no plan)
  // Absent when the step was not probed (a step that leaves deferred repairs is not: see below).
  std::optional<StepFidelity> fidelity;
  // Instances whose repair an edit deferred (WindowPolicy::defer_repairs) after the step. The window is
  // then not probed: the model never reads this state, since the next read or forwarding step runs the
  // repairs first (and is probed and charged for them).
  int64_t deferred = 0;
  // Fidelity was asked for, but the window and the probe pass the model's positions: not measured.
  bool probe_unfit = false;
  std::vector<int64_t> generated;    // generate, disposable: this policy's answer
  double agreement = -1;             // generate: fraction of answer tokens equal to the transcript's; -1 n/a
  std::optional<bool> disposable;    // disposable: the verdict
  double kl_first = 0;               // disposable: KL of the first answer token with / without the patch
  std::string plan;                  // Plan::describe() when explain
  std::vector<InstanceLoss> losses;  // ReplayOptions::attribute: each approximate instance's own loss
};

// How an instance's approximate KV came about, as ReplayOptions::attribute groups them: "kept over a
// context change" when its context changed since it was formed, otherwise how it was formed
// (step_action_name, with the patch match: "apply-patch/stale", "blind", "recompute", ...).
std::string served_as(const InstanceLoss& loss);

// The fidelity model against the per-instance measurements of one way of serving (ReplayOptions::
// attribute), over the instances where both the predicted and the measured KL exceed kKlFloor.
struct LossAgreement {
  std::string served_as;
  int64_t instances = 0;        // every attributed instance served this way
  int64_t compared = 0;         // of which both KLs above kKlFloor
  double mean_measured_kl = 0;  // over `instances`
  double mean_predicted_kl = 0;
  double bias = 0;    // geometric mean of predicted / measured over `compared` (1 = unbiased; 0: none)
  double spread = 0;  // exp of the mean |log(predicted / measured)| (>= 1; 0: none)
};

// The offline bound (planner/offline.h) over the patch demands of one patch-forming policy: every step
// that formed or applied a patch demands the patch of (chunk, context) — keyed by the antecedent set when
// the policy uses orbit patches, by the ordered context otherwise — of its estimated bytes, at the cost of
// forming it (the chunk's tokens). Compulsory: first demands; Belady: optimal-size-blind eviction under
// the capacity; LRU alongside. online_* are what the replayed policy actually formed.
struct OfflineReport {
  int64_t capacity_bytes = 0;
  int64_t demands = 0;
  int64_t distinct_patches = 0;
  int64_t online_formations = 0;
  double online_form_tokens = 0;
  int64_t compulsory_formations = 0;
  double compulsory_form_tokens = 0;
  int64_t belady_formations = 0;
  double belady_form_tokens = 0;
  int64_t lru_formations = 0;
  double lru_form_tokens = 0;
};

struct PolicyTotals {
  double forward_tokens = 0;  // critical + background
  double critical_forward_tokens = 0;
  double query_forward_tokens = 0;  // of which reads' queries (StepResult::query_forward_tokens)
  double prefix_cache_tokens = 0;   // the chunk-granular ledger (StepResult::prefix_cache_tokens)
  int64_t yardstick_reads = 0;      // steps that were reads
  double radix_tokens = 0;          // sums of the StepResult fields of the same names
  double radix_unbounded_tokens = 0;
  double block_cache_tokens = 0;
  double radix_call_tokens = 0;  // StepResult::radix_call_tokens' sum
  double background_forward_tokens = 0;
  double heal_forward_tokens = 0;     // of the background: Window::idle's heals after generate steps
  double prepare_forward_tokens = 0;  // and its prepared recalls
  double check_forward_tokens = 0;    // and its fidelity self-checks' probes
  int64_t fidelity_checks = 0;        // steps whose idle time checked the fidelity model
  double fidelity_correction = 1;     // the engine's correction after the last step (EngineStats)
  double critical_seconds = 0;
  double background_seconds = 0;
  // Over the steps with fidelity and a plan (the measured ones, to compare with mean_kl); where no step was
  // measured (ReplayOptions::fidelity off), over every step with a plan (the prediction needs no measurement).
  // mean_predicted_steps: the steps it is over; with none it is 0 (null in JSON).
  double mean_predicted_kl = 0;
  int64_t mean_predicted_steps = 0;
  // Agreement of the fidelity model with the measurement, over the steps where both the plan's predicted
  // KL and the measured KL exceed kKlFloor: the geometric mean of predicted / measured (1 = unbiased) and
  // the typical factor by which one step's prediction misses (exp of the mean |log ratio|, >= 1).
  // 0 (JSON null) when no step qualifies.
  int64_t predicted_steps = 0;
  double kl_prediction_bias = 0;
  double kl_prediction_spread = 0;
  double full_prefill_tokens = 0;
  double decode_tokens = 0;
  double seconds = 0;
  int64_t bytes_moved = 0;
  int64_t peak_device_bytes = 0;
  int64_t patches_formed = 0;
  int64_t patch_hits = 0;
  int64_t refused = 0;         // steps the window refused
  int64_t fidelity_steps = 0;  // steps measured; 0: the three below mean nothing (JSON null, CLI "n/a")
  // Steps left unmeasured because the window and the probe together pass the model's positions (a long probe
  // leaves most steps so): the KL and top-1 below are over the others only.
  int64_t probe_unfit_steps = 0;
  double mean_kl = 0;  // over steps with fidelity
  double max_kl = 0;
  double mean_top1 = 0;
  // Sums over the measured steps of StepFidelity's row counts: how many top-1 misses, and how many of them
  // at reference near ties (kNearTieLogits), among how many near-tie rows.
  int64_t top1_rows = 0;
  int64_t top1_misses = 0;
  int64_t near_tie_rows = 0;
  int64_t near_tie_misses = 0;
  std::vector<LossAgreement> loss_agreement;  // ReplayOptions::attribute: by served_as, most instances first
};

struct PolicyReplay {
  std::string policy;     // WindowPolicy::name()
  bool baseline = false;  // added as a baseline (not asked for)
  std::vector<StepResult> steps;
  PolicyTotals totals;
  std::optional<OfflineReport> offline;  // patch-forming policies
  // The engine's fidelity model (FidelityModel::describe) after the replay: what it planned with, and the
  // self-checks' correction it ended with (", correction xF" when not 1).
  std::string fidelity_model;
  int64_t yardstick_capacity_tokens = 0;  // the bounded yardsticks' KV budget: the engine's pool in tokens
  int64_t yardstick_block_tokens = 16;    // the block yardstick's block size
};

struct ReplayReport {
  std::string trace;  // trace name (or file)
  std::string source;
  std::string model;
  std::string fingerprint;
  std::string device;  // where the engines ran ("cpu", "cuda:0", ...) and in which dtype
  std::string dtype;
  std::size_t steps = 0;
  std::vector<PolicyReplay> policies;                              // in the order asked, then reprefill, prefix, blind
  const PolicyReplay* find(const std::string& policy_name) const;  // nullptr when absent
};

// Whether a policy forms patches on a miss, so that its replay reports the offline bound of its patch demands
// (PolicyReplay::offline): the patch presets and the default; not reprefill, prefix, blind, firstk, cacheblend.
bool forms_patches(const WindowPolicy& policy);

// Each policy is one column of a replay's report: throws orbit::Error when two of `specs` give the same
// policy ("<what> lists 'S' twice", or "lists 'A' and 'B', the same policy (NAME)"), or a spec does not parse
// (parse_policy's error).
void check_policy_columns(const std::vector<std::string>& specs, const std::string& what);

// Throws orbit::Error for a trace that does not fit the model (ids outside the vocabulary, positions past
// the model's limit, ...), naming the step / chunk and field, or for a bad policy spec or two that give one
// policy (check_policy_columns); and for a patch_capacity_bytes given where no policy asked for forms patches
// (it would size nothing).
ReplayReport replay(const Trace& trace, const ReplayOptions& options);

// The report as JSON (schema: top-level format "orbit-replay/1", trace, source, model, fingerprint, device, dtype,
// steps, policies[]; per policy policy, baseline, totals{...}, offline{...} or null, steps[] with every StepResult
// field by its name and op as its JSON name; fidelity {kl, top1, rows} or null; with ReplayOptions::attribute,
// a step's losses as instance_losses[] {instance, label, position, length, served_as, kv_change, measured_kl,
// predicted_kl} and totals.loss_agreement[] {served_as, instances, compared, mean_measured_kl,
// mean_predicted_kl, bias, spread}; both absent otherwise).
std::string replay_report_json(const ReplayReport& report, int indent = 2);

}  // namespace orbit
