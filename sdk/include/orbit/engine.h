// Engine: one model, one KV pool, one chunk store (docs/ARCHITECTURE.md §5). The entry point of the SDK.
//
//   auto engine = orbit::Engine::open({.model = "models/stories260K/stories260K.bin"});
//   orbit::ChunkRef a = engine->add_tokens({1, 365, 169, ...}, {.label = "page 1"});
//   orbit::Window w = engine->new_window();
//   w.admit(a);                                   // canonical encoded once, stored position-free
//   w.add_turn({...});                            // a live turn, prefilled in context
//   orbit::Generation g = w.generate({...});
//
// Text: with a tokenizer (a Hugging Face directory's tokenizer.json, llama2.c's format beside a llama2.c
// model, or one named by EngineOptions::tokenizer) text goes wherever token ids do:
//
//   orbit::ChunkRef s = engine->add_text("Once upon a time, there was a dog.", {}, /*bos=*/true);
//   w.admit(s);
//   w.add_turn("The dog liked to");
//   std::cout << w.generate(" play", {.max_tokens = 20}).text;
//
// Chunks are registered once per engine (their canonical KV is computed on first use and stored; a
// store directory makes it persist across processes) and placed into any number of windows.
//
// Thread-safety: every Engine member is safe to call from any thread; windows are single-threaded
// (window.h). An Engine lives as long as its last shared_ptr or Window; close() releases the store early:
// it waits for the operations in flight on other threads (Engine or Window calls) to finish, and every
// call that starts after it throws orbit::Error "engine is closed" (options() and the tokenizer's calls
// included), except stats(), closed(), observe_fidelity(), constraint_cache(), fidelity_model_description() and
// fidelity_calibration().
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/chunk.h"
#include "orbit/constraint_cache.h"
#include "orbit/errors.h"
#include "orbit/store.h"
#include "orbit/tool_calls.h"
#include "orbit/window.h"

namespace orbit {

// Where a chunk's canonical and patch are formed after its first sight (an exact in-context prefill on
// the critical path). See run_background().
enum class BackgroundMode {
  kThread,    // a worker thread forms them as they are queued (the default)
  kDeferred,  // they wait for run_background(): idle time the caller picks, e.g. while a tool runs
  kInline,    // at the end of the apply() that queued them, on its thread (simplest; no concurrency)
};
// "thread", "deferred", "inline".
const char* background_mode_name(BackgroundMode mode) noexcept;

struct EngineOptions {
  // A llama2.c .bin file or a Hugging Face directory (config.json + *.safetensors).
  std::string model;
  // Store directory (SQLite index + blobs; created if missing). Empty = memory only (nothing persists).
  std::string store_dir;
  int64_t pool_bytes = int64_t{256} << 20;  // KV pool for windows (whole pages; the device budget)
  // Tokens per page, in [1, kMaxPageSize]; Engine::open throws orbit::Error naming page_size outside it.
  int64_t page_size = 16;
  // The most tokens a KV page may hold: far past any useful page (a model's whole context is a few hundred
  // thousand positions), and small enough that a page's byte size (layers × page_size × widths × element
  // size) is a product that fits 64 bits for any model that loads.
  static constexpr int64_t kMaxPageSize = int64_t{1} << 20;
  // Windows that serve a chunk from its canonical (the canonical, blind, stored-patch actions) read one
  // set of the chunk's canonical pages in the pool, shared by reference count, each adding its own patch
  // factors as it reads them, instead of writing a patched copy per placement (EngineStats::pool_canonical_*
  // count them). Equal to the copy within float tolerance (docs/ARCHITECTURE.md §13). On a CUDA engine the
  // paged kernel adds the factors as it reads the pages; the factors live on the device, in the engine's
  // dtype where that is bfloat16 or float16 (half the bytes of float32; the products are summed in float32),
  // float32 otherwise.
  // false: every placement writes its own pages.
  bool shared_canonicals = true;
  // Each window of a CPU engine keeps its KV as one contiguous past between its reads (a forward behind it, a
  // decode's first step, logits), so that a read after a short append copies what was appended instead of the whole
  // window out of the pool again (rows kept by each entry's content version and position; equal bit for bit to a
  // fresh copy). It costs host memory: up to twice the window's KV bytes (64 rows' at least) per window, fitted again
  // when the window shrinks (WindowStats::past_bytes), on top of the pool. false: every read copies the whole window
  // (as before this existed). Unused on a CUDA engine, whose reads read the pool's pages in place.
  bool window_past = true;
  int64_t host_budget_bytes = int64_t{1} << 30;  // the store's host-memory tier
  // 0 = unlimited; > 0 needs store_dir. Processes sharing store_dir share it: each write's commit checks it
  // against every process's rows in the index, inside the commit's transaction.
  int64_t disk_budget_bytes = 0;
  // A remote tier shared by processes and machines: "redis://host:port[/db]" or
  // "redis-cluster://h1:p1,h2:p2,..." (Redis or Valkey); rediss:// and rediss-cluster:// over TLS (CA and
  // client certificate from the ORBIT_REDIS_TLS_* environment variables). Empty = none. Lookups go device → host → disk
  // → remote → compute; a remote hit is promoted to host and disk. The remote down or slow never stops
  // the engine (bounded timeouts, one warning, stats().store.remote counts it). See README "Remote tier".
  std::string remote;
  int64_t remote_ttl_seconds = 0;  // entries written to the remote expire after this; 0 = never; > 0 needs remote
  // The share of disk_budget_bytes (0..1) that entries kept on disk for their undelivered remote writes may fill
  // (store::RemoteOptions::max_held_fraction): past it the oldest are evicted and their writes given up
  // (stats().store.remote.abandoned, one warning a run), so a remote down for long does not stop the disk from
  // caching. 1 = keep every one (a put that needs their room is refused); 0 = keep none. Another value than the
  // default needs remote, store_dir and disk_budget_bytes > 0.
  double remote_max_held_fraction = 0.5;
  // The operator's secret for the remote tier ("" = the environment variable ORBIT_REMOTE_SECRET, if set).
  // With a secret every value written carries an HMAC-SHA256 over its key and bytes, and a value read
  // without a valid one (written without the secret, with another, or altered) is refused: counted in
  // stats().store.remote.corrupt, removed from the server and recomputed. Every remote value is also
  // checked against the chunk and the model (kind, dtype, shapes, layer count, finite values) before it
  // is used or copied into the local tiers. Never shown in a message, a warning or stats. Given without a
  // remote it is an orbit::Error (ORBIT_REMOTE_SECRET set without one is not).
  std::string remote_secret;
  // ---- the store's tiers (docs/ARCHITECTURE.md §6) ----
  // Eviction policy of the device, host and disk tiers: "lru" (least recently used first) or "cost-aware"
  // (lowest (expected reuse + hits) × recompute tokens / bytes first: what each byte saves in forwards,
  // so an often-used chunk outlives a recent one-off). Anything else is an orbit::Error naming this option.
  std::string eviction = "lru";
  // How canonical-shaped KV (canonicals, and the conditioned KV a prefix-cache policy stores) is written
  // to disk: "exact" (float32, lossless) or "int8" (symmetric int8 per row of head_dim values plus a
  // float32 scale per row: about 1/4 of the bytes; each value read back within max|row| / 254 of the
  // original). Patches and embeddings stay exact. "int8" needs a store_dir (an orbit::Error without one). A plan that
  // reads KV back from int8 rows prices the rounding (PlanStep::quantized_kl, planner/fidelity_model.h quantized) and
  // is not exact.
  std::string cold_tier = "exact";
  // A device tier of this many bytes (whole pages of page_size tokens, float32): canonicals kept in the
  // device's memory, so a recall from it needs no host-to-device copy; under pressure they are demoted
  // to the host tier. 0 = none. Needs a CUDA engine (device "cuda[:N]"); on "cpu" it is an orbit::Error
  // naming this option. On a CUDA engine the host tier uses pinned (page-locked) memory either way.
  int64_t device_tier_bytes = 0;
  // Keep the input embeddings of media chunks registered with a media_digest in the store (the embedding
  // cache), so that Engine::find_media finds them later (here, in another process sharing store_dir, or
  // through the remote tier) and the caller skips its vision encoder. false: they are not stored, and find_media
  // finds only the media chunks this engine has registered.
  bool embedding_cache = true;
  // Chunks kept registered for lookup by key beyond those in use: 0 (the default) keeps every chunk for the
  // engine's life, so a ChunkRef stays valid as long as the engine; N keeps the N most recently added or
  // used (and pinned ones), and a chunk no window (or queued background job) holds is forgotten past them (a
  // window's evicted chunk with it: its eviction counts as a use, and the window remembers it for recall only
  // while it is kept): its ChunkRef then reads as unregistered until it is added again, which finds its
  // stored KV again by the same key. A long-running process that sees ever new content (a server syncing
  // agents' messages) sets it so its chunk records stay bounded; EngineStats::chunks counts the live ones.
  int64_t max_idle_chunks = 0;
  int threads = 0;  // intra-op threads; 0 = keep the process setting
  BackgroundMode background = BackgroundMode::kThread;
  // The KV queued background jobs may hold (each first sight's in-context KV, kept until its patch is formed),
  // bytes: 0 (the default) bounds nothing; N drops the oldest queued jobs once the queue holds more (their
  // patches are not formed: a read finds them missing, as evicted ones; EngineStats::background_dropped). For
  // BackgroundMode::kDeferred work that may not find idle time for long (a server under sustained load).
  int64_t max_background_bytes = 0;
  // Where the model, its KV pool and every window's KV live: "cpu", "cuda" (= cuda:0) or "cuda:N".
  // Asking for CUDA in a process without a CUDA device is an orbit::Error naming this option.
  std::string device = "cpu";
  // Compute dtype of weights, activations and KV: "float32", "bfloat16" or "float16" (float16 on CUDA only).
  // Weights load straight into it (a bf16 checkpoint is never widened to float32 on the way).
  std::string dtype = "float32";
  // A tokenizer file: Hugging Face's tokenizer.json (or a directory holding one), or llama2.c's
  // (tok512.bin, tokenizer.bin). Empty: a Hugging Face model directory's tokenizer.json, else the one
  // beside a llama2.c model (tok<vocab>.bin, else tokenizer.bin), if any. Its ids must fit the model's
  // vocabulary (runtime/tokenizer.h: load_tokenizer). One given that is missing or unreadable (a directory
  // without tokenizer.json) throws orbit::Error naming EngineOptions::tokenizer and the path, before the
  // model loads.
  std::string tokenizer;
  // Bounds of the engine's cache of compiled constraints (Engine::constraint_cache): 64 entries, 256 MiB.
  ConstraintCacheOptions constraint_cache;
  // Keep the fidelity calibration in the store (docs/ARCHITECTURE.md §10). With a store_dir or a remote,
  // calibrate() and calibrate_fidelity() write the deficits they measured there (one small entry of kind
  // "other", keyed by the model fingerprint, which covers the dtype, the measurement's version and its seed
  // count): in the store directory, and queued for the remote tier when there is one. An engine of this
  // model then fits its fidelity model from the entry it finds, as calibrate_fidelity() would, without
  // measuring (Engine::fidelity_calibration() says "store", or "remote" for the remote tier's): open() reads
  // the store directory's; when that holds none, the remote tier is asked at the first plan,
  // fidelity_model_description() or fidelity_calibration() call, never at open() (an open must not wait for
  // a remote that does not answer, nor warn of it before the caller's own check, orbit::ping_remote, could).
  // The store directory's entry wins when both hold one; a remote hit is copied into the store directory.
  // The remote's answer is final (a miss is not asked again); a remote that does not answer leaves the
  // defaults until a later plan or question asks again, at most once per the remote tier's retry interval
  // (the tier answers a miss at once while it is down). Nothing is kept for a memory-only engine without a
  // remote. The entry is an ordinary one: a disk budget or a remote TTL may evict it, and
  // the next engine then starts from the defaults. An entry that does not decode (other tensors, a loss kind
  // it does not know, a negative or non-finite value, another model or version; on the remote, anything its
  // value checks refuse) is ignored with a warning on stderr naming its key once, and the defaults stay; the cost
  // model (machine timings) is never stored.
  // false: neither read nor written (an engine that must start from the defaults, e.g. a replay comparing
  // uncalibrated policies on a shared store).
  bool stored_calibration = true;
};

struct ModelInfo {
  std::string origin;        // path it was loaded from
  std::string architecture;  // "llama", "qwen2", "qwen2_vl", "deepseek_v2"
  std::string fingerprint;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  int64_t max_positions = 0;  // positions a window may hold: max_position_embeddings (x rope factor: dynamic NTK)
  int64_t position_rows = 1;  // 3 for M-RoPE models (chunks may carry (t, h, w) grids)
  int64_t hidden_size = 0;
  int64_t kv_bytes_per_token = 0;  // content channel, all layers, float32 (the store's form)
  std::string device;              // where it runs, e.g. "cpu", "cuda:0"
  std::string dtype;               // compute dtype, e.g. "float32", "bfloat16"
  std::string tokenizer;           // the tokenizer file in use; "" when none (text calls throw)
  int64_t bos_token = -1;          // from the tokenizer; -1 when none
  int64_t eos_token = -1;
};

// One of the engine's in-memory tables that grow with the distinct content it sees (EngineStats below): what it
// holds now and its bounds, entries and bytes (a bound of 0: not bounded that way; bytes 0: not counted).
struct TableUsage {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t max_entries = 0;
  int64_t max_bytes = 0;
};

struct EngineStats {
  int64_t chunks = 0;   // registered (with max_idle_chunks: those kept and those in use)
  int64_t windows = 0;  // alive
  int64_t pool_pages = 0;
  int64_t pool_free_pages = 0;
  int64_t pool_bytes_used = 0;  // live pages × page bytes
  // Shared canonicals (EngineOptions::shared_canonicals), from the pool's reference counts: the chunks whose
  // canonical pages windows read in place, those pages (counted in pool_bytes_used once, however many
  // windows read them), the placements reading them (forks' included), and the distinct patch factors
  // those placements carry (on the engine's device, in the type shared_canonicals names; not pool pages)
  // with their bytes.
  int64_t pool_canonical_sets = 0;
  int64_t pool_canonical_pages = 0;
  int64_t pool_placements = 0;
  int64_t pool_patches = 0;
  int64_t pool_patch_bytes = 0;
  int64_t canonicals_encoded = 0;  // forwards of chunks alone
  int64_t patches_formed = 0;
  int64_t patch_hits = 0;
  // Token-forwards, summed over windows. forward_tokens: all windows' operations (the plans apply() serves)
  // and background work; the reads' query forwards are apart from it, in the two counters below. Every forward
  // the engine ran is forward_tokens + query_forward_tokens + logits_forward_tokens, but for the decode
  // steps (one per generated token, Generation::tokens) and the measurements (reference_logits,
  // loss_by_instance). Against radix_cache_tokens, which counts the prompts of the model calls that decode
  // (window and query), compare critical_forward_tokens + query_forward_tokens: the same reads' tokens on
  // both sides (`orbit replay`'s StepResult::critical_forward_tokens and serve's usage.orbit.forward_tokens
  // are that sum, per step and per request).
  double forward_tokens = 0;
  // Of forward_tokens: on the critical path (inside apply(), and the canonicals encoded on the caller's thread:
  // precompute's, and disposable's when its instance's canonical is not stored, which that window counts too).
  double critical_forward_tokens = 0;
  double background_forward_tokens = 0;  // of forward_tokens: in the background (canonical encodes, Window::heal)
  // Of the background: the fidelity self-checks' probe forwards (Window::idle, IdleReport::measured_kl).
  double check_forward_tokens = 0;
  // The query forwards of the model calls that decode, on the critical path: generate's (generate_n's,
  // generate_many's, a DecodeBatch's) prompt forward, Generation::prompt_forward_tokens; disposable's query,
  // twice (its two greedy decodes each forward it whole). Counted when the call returns its answer.
  double query_forward_tokens = 0;
  // Window::logits()'s query forwards (the query's tokens), on the critical path; radix_cache_tokens does not
  // count logits() calls.
  double logits_forward_tokens = 0;
  // The self-checks' correction of the fidelity model: every prediction plans make is multiplied by it
  // (planner::FidelityCorrection: the largest measured / predicted of the last 8 checks, in [1, 64]).
  // 1 until a check finds the model predicting too little.
  double fidelity_correction = 1;
  int64_t fidelity_checks = 0;  // checks counted in it
  // What a prefix cache would have forwarded on the critical path for the same window operations, summed
  // over windows (WindowStats::prefix_cache_tokens): compare with critical_forward_tokens.
  double prefix_cache_tokens = 0;
  // What a radix cache would have forwarded for every window's model calls that decode
  // (WindowStats::radix_cache_tokens): compare with critical_forward_tokens + query_forward_tokens.
  double radix_cache_tokens = 0;
  double critical_seconds = 0;     // wall time inside apply() (the critical path; inline background work and
                                   // Window::heal excluded)
  double background_seconds = 0;   // wall time of background jobs (canonical encode + SVD + store) and heals
  int64_t background_jobs = 0;     // background jobs completed
  int64_t background_pending = 0;  // queued, not started
  int64_t background_failed = 0;   // jobs that threw (their patch is not stored)
  std::string background_error;    // the last failure's message
  int64_t media_found = 0;         // find_media() found the chunk: registered here, or in the embedding cache
  int64_t media_missed = 0;        // find_media() found no embeddings (the caller encodes)
  // The KV the queued background jobs hold (EngineOptions::max_background_bytes bounds it), and the jobs dropped
  // past that bound, in all (their patches not formed).
  int64_t background_pending_bytes = 0;
  int64_t background_dropped = 0;
  // Engine::constraint_cache(): its entries and bytes (recounted), hits and misses (builds).
  ConstraintCacheStats constraint_cache;
  // The other bounded tables a long-running engine fills, beside its pool, host tier and store: each levels off
  // at its bound, the least recently used let go (none is set by an option). The patch catalog: what patches
  // exist for each chunk and context (about 16 MiB). The turn lengths: the token counts of turns seen, which
  // weigh stale patches' contexts (65,536). The prefix ledger: the chunk-prefix cache yardstick's prefixes
  // (65,536). The radix yardstick: the tokens it holds (entries; bounded by the pool and host tier's tokens).
  // The tokenizer's cache of split words (a Hugging Face BPE's: 10,000 words, 16 MiB). The exact-reuse index: the
  // token sequences forwarded behind known KV states, by which a later read finds KV to reuse (65,536 sequences;
  // bytes: their token ids, 4 each, at most 16 MiB; with the store keys and the hash table about 27 MiB when full).
  TableUsage patch_catalog;
  TableUsage turn_lengths;
  TableUsage prefix_ledger;
  TableUsage radix_yardstick;
  TableUsage tokenizer_cache;
  TableUsage reuse_index;
  StoreStats store;
};

// Engine::calibrate_fidelity's progress: called after each seed with the seeds measured and all of them.
using CalibrationProgress = std::function<void(int64_t seeds_done, int64_t seeds)>;

// What calibrate() measured: the planner's cost model fitted on this machine.
struct CalibrationReport {
  int64_t samples = 0;
  double seconds = 0;      // wall time of the calibration
  std::string cost_model;  // the fitted coefficients, one line
  // The remote tier's read rate the cost model now uses (bytes/s): a probe read from the server plus the
  // remote hits so far. 0 without a remote tier or when it was down (the default rate stays).
  double remote_bytes_per_s = 0;
  int64_t fidelity_samples = 0;
  std::string fidelity_model;  // the fitted fidelity coefficients (KL per unit of loss), one line
  // Of fidelity_samples, those measuring dynamic-NTK's shortfall (content formed in a shorter window than it is
  // read in: docs/ARCHITECTURE.md §7); 0 on a model without dynamic-NTK RoPE scaling (or anchored past 512).
  int64_t shortfall_samples = 0;
  // The shortfall coefficient the planner now prices with (KL per unit of (Δ ln scale)² · recency weight), fitted
  // on those samples; 0 when none were measured (the default, planner::kShortfallCoefficient, stays).
  double shortfall_coefficient = 0;
  // The measured deficits were written to the store (EngineOptions::stored_calibration) for the engines that
  // open this model on it later (the remote tier's copy is queued: sent in the background, not waited for).
  // false without a store_dir or remote, with stored_calibration off, or when the store refused the write (a
  // full disk: the fit still applies to this engine).
  bool stored = false;
};

// What Engine::close() does with the background work queued when it is called (the canonicals and patches of
// first sights, which a persistent store keeps for the next run and for other processes sharing it).
struct CloseOptions {
  // The most seconds close() spends finishing that work; what is still queued then is dropped (its patches are
  // formed again when a later run needs them). Infinity (the default) finishes all of it; 0 none. Without a
  // store_dir or remote nothing would keep the results, so none is run whatever this says.
  double finish_seconds = std::numeric_limits<double>::infinity();
  // Asked (on close()'s thread, with the engine's locks held: it must not call into the SDK) before each job and
  // each layer of its forwards while close() finishes them; true drops the rest at once (a second SIGTERM).
  std::function<bool()> stop;
};

struct CloseReport {
  int64_t finished = 0;  // queued background jobs close() ran to their end
  int64_t dropped =
      0;  // queued jobs it cancelled (out of time, stopped, no persistent store, or queued after it began)
  bool stopped = false;  // CloseOptions::stop answered true
};

class Engine {
 public:
  // Loads the model and opens the store. Throws orbit::Error naming the file or option at fault (a model
  // that does not load, a store of another model fingerprint, a store being collected or repaired, a
  // malformed remote URL). Other processes may have the same store directory open (they share it).
  static std::shared_ptr<Engine> open(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const;
  ModelInfo model_info() const;

  // Registers a chunk (idempotent: the same content gives the same key and ChunkRef). Nothing is
  // computed until a window first needs its canonical. Throws on an empty chunk, ids outside the
  // vocabulary, embeddings of the wrong width or dtype, or a grid whose shape is not [3, n] / [n].
  ChunkRef add_tokens(const std::vector<int64_t>& tokens, const ChunkOptions& options = {});
  ChunkRef add_embeddings(const EmbeddingChunk& chunk, const ChunkOptions& options = {});
  // A chunk of text: tokenize(text, bos) registered as add_tokens. BOS only for a window's first chunk
  // (the text's start); the dummy-prefix space llama2.c puts before any text joins pieces like words.
  ChunkRef add_text(std::string_view text, const ChunkOptions& options = {}, bool bos = false);

  // ---- text ----
  // Every text call throws orbit::Error when the engine has no tokenizer (model_info().tokenizer is
  // empty), saying so; a model without one takes token ids.
  bool has_tokenizer() const;
  // The tokenizer's encoding: llama2.c's (orbit/runtime/tokenizer.h: BOS first when `bos`, the
  // dummy-prefix space, code points or their bytes, merges by score) or Hugging Face's tokenizer.json
  // pipeline (orbit/runtime/hf_tokenizer.h: `bos` adds the special tokens its config asks for, as HF's
  // tokenizers does with add_special_tokens).
  std::vector<int64_t> tokenize(std::string_view text, bool bos = true) const;
  // The text of `tokens` as if they followed `previous` (-1: nothing; BOS: the first piece's leading space
  // is dropped). BOS and EOS produce no text. Throws for ids outside the vocabulary, `previous` included.
  std::string detokenize(const std::vector<int64_t>& tokens, int64_t previous = -1) const;
  std::string piece(int64_t token) const;  // the vocabulary entry as stored (e.g. " the", "<0x0A>")
  // Refuses text too long for the model's positions before it is tokenized (tokenizing costs memory in
  // proportion to the text): throws orbit::RefusedError "<what>: the text is N bytes, more than the model's P
  // positions can hold (at most B bytes per token)" when `text` has more bytes than max_positions times
  // the longest piece's bytes. Text within that bound passes unread (it may still give more tokens than
  // fit). add_text and Window's text overloads run this check themselves; call it before tokenize() on
  // text bound for a window (the trace replay does).
  void check_text_fits(std::string_view text, const std::string& what) const;

  // ---- chat (orbit/sync.h) ----
  // Whether the model has a chat template (tokenizer_config.json's chat_template of its Hugging Face
  // directory). Throws orbit::Error when it has one the template interpreter does not support.
  bool has_chat_template() const;
  // `messages` rendered as Hugging Face's apply_chat_template(messages, add_generation_prompt) renders them
  // with the model's chat template, options.chat_template when given, else kPlainChatTemplate. Throws
  // orbit::Error naming the function, then the template and its line on what it refuses or cannot parse
  // ("render_chat: ChatOptions::chat_template: line 1: the template raised an exception: ..."), or the option
  // for malformed JSON ("render_chat: ChatOptions::tools_json is not valid JSON: ...").
  std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true,
                          const ChatOptions& options = {}) const;
  // The format the chat template in use (as render_chat picks it) writes tool calls in (orbit/tool_calls.h):
  // an assistant message holding one call is rendered, and the way the template wrote it names the format
  // (Mistral's [TOOL_CALLS], Llama 3's JSON with "parameters" or <|python_tag|>, else Hermes' <tool_call>,
  // which kPlainChatTemplate uses). kHermes when the template refuses such a message.
  ToolCallFormat tool_call_format(const ChatOptions& options = {}) const;
  // tokenize(render_chat(...)) with no special tokens added (templates write their own): what
  // Window::sync puts in a window (with add_generation_prompt = false). With a plan's options
  // (SyncPlan::options.chat) it renders at the plan's time (ChatOptions::now), not the clock's.
  std::vector<int64_t> tokenize_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true,
                                     const ChatOptions& options = {}) const;

  // ---- constrained decoding (orbit/constraint.h) ----
  // The engine's cache of compiled constraints (orbit/constraint_cache.h), bounded by
  // EngineOptions::constraint_cache and counted in stats().constraint_cache: keep a schema's Constraint there
  // (constraint_cache().json_schema(text)) and a loop that sends it again compiles it, and computes its token
  // masks, once. Python's Window.generate keeps what its tools / response_format compile to there. Lives as
  // long as the engine, usable after close() too.
  ConstraintCache& constraint_cache();

  // The media chunk an earlier add_embeddings(chunk with this media_digest and grid) registered: this engine's
  // own, while it keeps it registered, else from the embedding cache (EngineOptions::embedding_cache): this
  // engine's store, another process's through a shared store_dir, or the remote tier. Registers it (as
  // add_embeddings would, with the embeddings read from the store; ChunkOptions::pin pins it either way) and
  // returns its ref; nullopt when neither holds it: run the
  // vision encoder and call add_embeddings. Throws orbit::Error on an empty digest, a grid of the wrong
  // shape, or neither a grid nor rows.
  std::optional<ChunkRef> find_media(const MediaLookup& lookup, const ChunkOptions& options = {});

  // The registered chunk with this key; throws orbit::Error when this engine does not know it (never
  // added, or forgotten past EngineOptions::max_idle_chunks).
  ChunkRef chunk(const std::string& key) const;
  // Whether chunk(key) would find it (false for an empty key), without counting as a use: chunk(key) makes the
  // chunk the most recently used, the last that max_idle_chunks forgets, where asking this changes nothing.
  bool has_chunk(const std::string& key) const;
  std::vector<ChunkRef> chunks() const;  // the registered ones, in registration order
  // Encodes the canonical now (one forward of the chunk alone) if the store does not hold it.
  void precompute(const ChunkRef& chunk);

  // Throws orbit::Error for a negative max_bytes, or a policy with a field its strategy never reads
  // (validate_policy).
  Window new_window(const WindowOptions& options = {});

  // Times forwards (several lengths and contexts), key relocation, patch forming and applying and tier
  // reads with this model on this machine, and fits the planner's cost model from them. Plans then carry
  // calibrated time estimates, and cost-aware policies (WindowPolicy::cost_aware) choose load+patch vs.
  // form vs. recompute with it. Until called, a conservative default model is used. Takes about a second
  // on the bundled model, longer on large ones.
  //
  // With a remote tier it also writes a probe blob to the server and times reading it back, so plans
  // price remote recalls at the measured rate (CalibrationReport::remote_bytes_per_s).
  //
  // It also fits the fidelity model (planner/fidelity_model.h) that fidelity-budgeted policies (`:kl=X`)
  // plan with, from deficits measured on this model: removal (survivors kept after an eviction before
  // them), stale and orbit patches (recall and reorder), blind reuse, truncated ranks, first-k and
  // CacheBlend recompute, each as the next-token KL against a re-prefill. A few seconds on the bundled
  // model.
  CalibrationReport calibrate();
  // Fits only the fidelity model, as calibrate() does, and leaves the cost model as it is (the report's
  // cost fields stay empty). Nothing is timed and the samples are seeded, so two engines of one model fit
  // the same model and plan the same: what a replay comparing policies or models needs. The defaults are
  // this fit on the bundled stories260K; another model's KV moves by another share under the same change
  // of context (the fit's reference sensitivity: 7.2e-2 on tinystories-656k against 7.9e-3). Both
  // calibrations take the model halfway from the defaults toward the fit, in log space
  // (planner::kCalibrationWeight).
  //
  // `progress` (when set) is called on the calling thread after each seed's deficits are measured, with the
  // seeds measured so far and all of them (the measurement's seed count); an exception it throws stops the
  // calibration and propagates, nothing fitted or stored.
  CalibrationReport calibrate_fidelity(const CalibrationProgress& progress = {});
  // The fidelity model plans use now (its coefficients, each marked fitted or default), one line.
  std::string fidelity_model_description() const;
  // Where that model comes from: "default" (never calibrated, or no stored calibration read yet), "store"
  // (fitted from the calibration the store directory holds, EngineOptions::stored_calibration), "remote"
  // (fitted from the remote tier's, asked by a call of this, fidelity_model_description() or a plan when the
  // store directory holds none; again at a later one while the remote does not answer) or "calibrated"
  // (calibrate() or calibrate_fidelity() ran on this engine). Answers after close() too (without asking the
  // remote).
  std::string fidelity_calibration() const;

  // Runs queued background work (canonical encodes and patch forming) on the calling thread until none
  // is left or `max_seconds` passed, then waits for the worker's job in flight (kThread). Returns the
  // jobs run here. Call it in idle time under BackgroundMode::kDeferred; under kThread it waits for the
  // queue to drain.
  int64_t run_background(double max_seconds = 1e30);

  EngineStats stats() const;
  // A measured loss from outside the engine's own self-checks (a server's audit: a read's next-token KL
  // against a re-prefill of the same window, and what the engine predicted for that window): counted in
  // the fidelity correction every later plan sees (EngineStats::fidelity_correction), as Window::idle's
  // checks are. Returns false when it is not counted (a non-finite or negative value, or both KLs
  // negligible).
  bool observe_fidelity(double measured_kl, double predicted_kl);
  // Finishes the background work queued so far (canonicals and patches of first sights, so the store keeps
  // them; CloseOptions bounds it), cancels what is queued after that and joins the background worker, then flushes
  // and closes the store once the operations in flight on other threads have returned (it blocks until then).
  // Idempotent; a concurrent second close() returns when the first has finished (an empty report, as every later
  // one). Windows still alive throw "engine is closed" on use afterwards (their pool pages are released when they
  // are destroyed). Throws orbit::Error if called from inside an operation of this engine on the same thread, and
  // when options.finish_seconds is negative or NaN.
  CloseReport close(const CloseOptions& options = {});
  bool closed() const;
  // True while the calling thread is inside an operation of this engine (a callback it runs: a progress
  // report, a signal handler run from a poll), where close() is refused: lets a caller that must stop its own
  // work before close() (a binding's decodes) refuse first and stop nothing.
  bool in_operation_on_this_thread() const;
  // True in a child of fork() of the process that opened the engine. An engine does not cross fork(): its
  // threads and its store's connections stay in the parent, and a lock a parent thread held at the fork stays
  // held. There every call (its windows' included) throws orbit::Error naming both processes, and close() and
  // the destructors release nothing (the parent's to release). Open a new Engine in the child.
  bool forked() const;

 private:
  friend class Window;
  explicit Engine(std::shared_ptr<detail::EngineCore> core);
  std::shared_ptr<detail::EngineCore> core_;
};

}  // namespace orbit
