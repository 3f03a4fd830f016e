// Several sequences decoded together (orbit/decode_batch.h): DecodeBatch, generate_many, and the reads
// built on them (Window::generate, the batch of one; Window::generate_n, a window and its forks).
//
// A sequence is Window::generate's loop turned inside out: what one iteration did (a forward, the
// Sampler's choice, the past grown by the forward's rows, the stop checks and callbacks) is one step, and
// a step runs the forwards of every sequence as one Model::forward_batch.
#include "orbit/decode_batch.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <tuple>

#include "engine/interruptible.h"
#include "orbit/common/error.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/text_stream.h"
#include "window/decode_parts.h"
#include "window/sampler.h"
#include "window/window_ops.h"

namespace orbit {

namespace detail {

using Clock = std::chrono::steady_clock;

// Which KV a window holds: equal KV-state chains hold equal KV (kv_state.h); its tokens and where it ends
// (the position its reads start at) besides, so a key names one read.
struct DecodeReadKey {
  uint64_t hi = 0, lo = 0;
  int64_t tokens = 0, end = 0;
  bool operator<(const DecodeReadKey& o) const {
    return std::tie(hi, lo, tokens, end) < std::tie(o.hi, o.lo, o.tokens, o.end);
  }
};

namespace {

// What the query's first forward looked at (ForwardResult::key_attention, the window's tokens first), summed
// per instance into the window's entries: the planner's evidence of what the next query reads.
void record_attention(WindowState& w, const at::Tensor& mass) {
  const std::vector<double> shares = attention_by_entry(w, mass);
  for (std::size_t i = 0; i < shares.size(); ++i) w.entries[i].attention = shares[i];
}

// The text of a sequence with stop strings or on_text, released as it becomes final: its tokens decoded after
// the query's last token, as Generation::text is. Under a constraint a stop string ends the answer only where
// the text before it is complete (from the trigger on, before it the text is free). Null without either.
std::unique_ptr<TextStream> text_stream(const EngineCore& core, const GenerateOptions& o, int64_t previous) {
  if (o.stop.empty() && !o.on_text) return nullptr;
  std::function<bool(const std::string&)> may_stop_before;
  if (o.constraint) {
    may_stop_before = [constraint = o.constraint, trigger = o.constraint_trigger,
                       block = o.constraint_trigger_block](const std::string& before) {
      if (trigger.empty() && block.empty()) return constraint->matches(before);
      const std::optional<std::size_t> at = TriggerWatch::find(before, trigger, block);
      return !at || constraint->matches(std::string_view(before).substr(*at));
    };
  }
  const runtime::Tokenizer* tokenizer = &core.tokenizer();
  return std::make_unique<TextStream>(
      [tokenizer, previous](const std::vector<int64_t>& tokens) { return tokenizer->decode(tokens, previous); }, o.stop,
      std::move(may_stop_before));
}

DecodeReadKey read_key(const WindowState& w) {
  const KvState chain = w.state_chain();
  DecodeReadKey k{chain.hi, chain.lo, w.tokens(), 0};
  for (const Entry& e : w.entries) k.end += e.extent;
  return k;
}

}  // namespace

// A window's KV read once, for the sequences added in one round.
struct DecodeWindowRead {
  runtime::PastKV past;
  int64_t start = 0;  // the position after the window
};

// One decoding sequence: Window::generate's loop state.
struct DecodeSequence {
  explicit DecodeSequence(Sampler s) : sampler(std::move(s)) {}

  uint64_t id = 0;
  WindowState* window = nullptr;
  std::vector<int64_t> query;
  GenerateOptions options;  // its callbacks
  Sampler sampler;
  runtime::PastKV past;        // the window's (and a reused query head), until the sequence's slot holds it
  int64_t slot = -1;           // its slot of the batch's DecodeCache from its first forward on
  std::vector<int64_t> input;  // what the next forward reads: the query (or its rest), then the last token
  int64_t pos = 0;             // the position of input's first token
  // Exact reuse: the KV of the query's head loaded from the store (reuse_query_head: none or one part); the
  // rest of the query's, and the answer's, the slot keeps (DecodeCache::open's keep_content), `kept` rows of
  // them (the query's forward, then each answer token but the last), the first `query_rows` the query's.
  std::vector<runtime::Content> head;
  bool keeps = false;  // its slot keeps content
  int64_t kept = 0, query_rows = 0;
  int64_t looked = 0;        // query tokens the read's look forwarded before its answer's (plan_read, look_first)
  bool look = false;         // its first forward is the read's look (WindowPolicy::read_attention_weight)
  bool done_before = false;  // finished before any token (e.g. a constraint to an empty literal)
  int64_t steps = 0;         // tokens chosen so far
  DecodeReadKey read;
  std::unique_ptr<TextStream> text;  // with stop strings or on_text (text_stream)
  std::string unsent;                // text `text` released that on_text has not been given yet
  Generation g;
  Clock::time_point t0;
  bool ending = false;
  bool held = false;  // DecodeBatch::hold: no part in steps until released
};

struct DecodeBatchState {
  std::shared_ptr<EngineCore> core;
  uint64_t next_id = 0;
  std::vector<std::unique_ptr<DecodeSequence>> running;  // in order of addition
  std::map<DecodeReadKey, DecodeWindowRead> reads;       // this round's window reads (until the next step)
  // Every running sequence's past from its first forward on, rotated once and grown by a row per step.
  std::unique_ptr<runtime::DecodeCache> cache;

  uint64_t add(WindowState& w, const std::vector<int64_t>& query, const GenerateOptions& options);
  DecodeStep step();

 private:
  void mark_endings_before_forward();
  void advance(DecodeSequence& s, const at::Tensor& logits, bool shared);
  void keep_for_reuse(const DecodeSequence& s, bool last) const;
  void forward(DecodeStep& out);
  bool sole_reader(const DecodeSequence& s) const;
  bool look_first(DecodeSequence& s, const at::Tensor& attention);
  void finish(DecodeStep& out);
  std::string finish_text(DecodeSequence& s) const;
};

uint64_t DecodeBatchState::add(WindowState& w, const std::vector<int64_t>& query, const GenerateOptions& options) {
  check_query(w, query, "generate");
  Sampler sampler = make_sampler(*w.core, options, query);  // checks the options
  // After the checks: a refused call changes nothing. The read's look (looks_before_read) is the sequence's
  // first forward (look_first), unless generate_n looked before it forked (read_planned).
  int64_t looked = w.read_planned;
  const bool look = looked < 0 && looks_before_read(w);
  if (looked >= 0) {
    w.read_planned = -1;
  } else {
    looked = 0;
    run_deferred(w, "generate");
  }
  {
    // A model call: what a prefix cache would compute for it (an edit since the last forward, say).
    Counters charged;
    charged.prefix_cache_tokens = charge_prefix_cache(w);
    w.core->usage().count(charged);
  }
  c10::InferenceMode guard;
  auto s = std::make_unique<DecodeSequence>(std::move(sampler));
  s->t0 = Clock::now();
  s->id = ++next_id;
  s->window = &w;
  s->query = query;
  s->options = options;
  s->text = text_stream(*core, options, query.back());
  s->read = read_key(w);
  auto it = reads.find(s->read);
  if (it == reads.end()) {
    DecodeWindowRead r;
    r.past = read_past(w, &r.start);
    it = reads.emplace(s->read, std::move(r)).first;
  }
  s->past = it->second.past;  // shares the tensors; growing it makes new ones
  s->pos = it->second.start;
  s->input = query;
  s->looked = looked;
  s->look = look;
  s->g.prompt_forward_tokens = looked;  // a sequence that ends before its first forward
  reuse_query_head(w, query, s->past, s->input, s->pos, s->head);
  s->done_before = s->sampler.finished();
  s->g.stop_reason = "max_tokens";
  running.push_back(std::move(s));
  return running.back()->id;
}

// Sequences that end without a forward: max_tokens reached (or 0), finished before any token, no room.
void DecodeBatchState::mark_endings_before_forward() {
  const int64_t limit = core->max_positions();
  for (auto& s : running) {
    if (s->held) continue;
    if (s->steps >= s->options.max_tokens || s->done_before) {
      s->ending = true;
    } else if (limit > 0 && s->pos + static_cast<int64_t>(s->input.size()) > limit) {
      s->g.stop_reason = "position_limit";
      s->ending = true;
    }
  }
}

// One iteration of Window::generate's loop after its forward: the token, the past, the stop checks.
void DecodeBatchState::advance(DecodeSequence& s, const at::Tensor& logits, bool shared) {
  const int64_t limit = core->max_positions();
  const int64_t width = static_cast<int64_t>(s.input.size());
  if (s.steps == 0) s.g.prompt_forward_tokens = (shared ? 0 : width) + s.looked;
  // Tokens the run may still emit after this one: max_tokens, and the positions left for their forwards.
  int64_t left = s.options.max_tokens - s.steps - 1;
  if (limit > 0) left = std::min(left, limit - s.pos - width);
  SamplerStep step = s.sampler.next(logits, left);
  if (!step.has_token()) {
    s.g.stop_reason = step.stop_reason;
    s.ending = true;
    return;
  }
  const int64_t next = step.token;
  s.g.tokens.push_back(next);
  if (step.logprobs.has_value()) s.g.logprobs.push_back(std::move(*step.logprobs));
  if (s.steps == 0) s.query_rows = width;
  s.kept += width;  // the slot holds these rows now
  s.pos += width;
  s.input = {next};
  if (s.text) s.unsent += s.text->push(next);
  // A token that completes a stop string and is a stop token too ends the run as a stop string: the text is
  // cut before the stop string, so that is the cut the reason names.
  if (s.text && s.text->stopped()) {
    s.g.stop_reason = "stop_string";
    s.ending = true;
    return;
  }
  if (s.sampler.is_stop_token(next)) {
    s.g.stop_reason = "stop_token";
    s.ending = true;
    return;
  }
  const InCallback in_callback(*s.window);  // the callbacks below must not use the window (refuse_in_callback)
  if (s.options.on_logprobs && !s.g.logprobs.empty()) s.options.on_logprobs(s.g.logprobs.back());
  if (s.options.on_token && !s.options.on_token(next, static_cast<int64_t>(s.g.tokens.size()) - 1)) {
    s.g.stop_reason = "cancelled";
    s.ending = true;
    return;
  }
  if (s.options.on_text && !s.unsent.empty()) {
    const std::string piece = std::move(s.unsent);
    s.unsent.clear();
    if (!s.options.on_text(piece)) {
      s.g.stop_reason = "cancelled";
      s.ending = true;
      return;
    }
  }
  if (s.sampler.finished()) {
    s.g.stop_reason = "constraint_complete";
    s.ending = true;
    return;
  }
  ++s.steps;
}

// Sets an ended sequence's Generation::text (cut at a stop string) and returns what on_text has not been given
// of it yet (nothing after a cancel).
std::string DecodeBatchState::finish_text(DecodeSequence& s) const {
  if (!core->has_tokenizer()) return "";
  if (s.text == nullptr) {
    s.g.text = core->tokenizer().decode(s.g.tokens, s.query.back());
    return "";
  }
  const std::size_t given = s.text->released().size() - s.unsent.size();  // bytes on_text was given
  std::string rest = std::move(s.unsent);
  if (s.text->stopped()) {
    s.text->finish();
    s.g.text = s.text->released();
  } else {
    // The whole decode, as without a stream; what was released is its start unless the decoder rewrote it.
    s.g.text = core->tokenizer().decode(s.g.tokens, s.query.back());
  }
  const std::string& released = s.text->released();
  if (s.g.text.size() >= released.size() && s.g.text.compare(0, released.size(), released) == 0) {
    rest = s.g.text.substr(given);
  }
  return s.g.stop_reason == "cancelled" ? std::string() : rest;
}

// Exact reuse of an ended sequence's read (keep_read_for_reuse): the query's KV, and with the answer's last
// token run (`last`: its row is the slot's last) the whole turn's, from the reused head and the slot's kept
// rows: views, with one concatenation only where a head or a forward whose token was not taken (a failed
// sample's rows lie before the last one's) splits them.
void DecodeBatchState::keep_for_reuse(const DecodeSequence& s, bool last) const {
  if (!s.keeps || s.kept == 0) return;  // nothing kept, or the query's forward gave no token
  auto joined = [&](std::vector<runtime::Content> rows) {
    if (!s.head.empty()) rows.insert(rows.begin(), s.head.front());
    return rows.size() == 1 ? std::move(rows.front()) : concat_contents(rows);
  };
  const runtime::Content query_kv = joined({cache->kept(s.slot, 0, s.query_rows)});
  if (!last) {
    keep_read_for_reuse(*s.window, s.query, s.g.tokens, &query_kv, nullptr);
    return;
  }
  const int64_t rows = cache->kept_rows(s.slot);
  const runtime::Content turn_kv =
      joined(rows == s.kept + 1
                 ? std::vector<runtime::Content>{cache->kept(s.slot, 0, rows)}
                 : std::vector<runtime::Content>{cache->kept(s.slot, 0, s.kept), cache->kept(s.slot, rows - 1, 1)});
  keep_read_for_reuse(*s.window, s.query, s.g.tokens, &query_kv, &turn_kv);
}

// The sequences that ended: their answers kept for exact reuse (the last tokens' KV in one forward), the
// radix yardstick charged, their text; removed from the batch.
void DecodeBatchState::finish(DecodeStep& out) {
  std::vector<DecodeSequence*> ending;
  std::vector<runtime::ForwardInput> inputs;
  std::vector<std::size_t> last_of;  // per ending sequence: its index in `inputs`, or npos
  for (auto& s : running) {
    if (!s->ending) continue;
    ending.push_back(s.get());
    Generation& g = s->g;
    if (s->sampler.constrained() && (s->done_before || (g.stop_reason == "max_tokens" && s->sampler.complete()))) {
      g.stop_reason = "constraint_complete";
    }
    last_of.push_back(std::string::npos);
    if (keep_needs_last(*s->window, g.tokens, s->keeps && s->kept > 0, s->pos)) {
      last_of.back() = inputs.size();
      inputs.push_back(core->registry().input_for_tokens({g.tokens.back()}, s->pos));
    }
  }
  if (ending.empty()) return;
  if (!inputs.empty()) {
    runtime::ForwardOptions fo;
    fo.logits = runtime::LogitsMode::kNone;
    fo.return_content = false;  // the slot keeps it
    std::vector<runtime::PastKV> pasts;
    pasts.reserve(ending.size());
    std::vector<runtime::SequenceForward> batch;
    for (std::size_t j = 0; j < ending.size(); ++j) {
      if (last_of[j] == std::string::npos) continue;
      pasts.push_back(cache->past(ending[j]->slot));
      batch.push_back({&inputs[last_of[j]], &pasts.back(), &fo});
    }
    core->model().forward_batch(batch);
  }
  for (std::size_t j = 0; j < ending.size(); ++j) {
    DecodeSequence& s = *ending[j];
    keep_for_reuse(s, last_of[j] != std::string::npos);
    keep_tail(*s.window, s.query, s.g.tokens);  // the window's tentative tail (window_ops.h)
    charge_radix_cache(*s.window, s.query, s.g.tokens, s.g.prompt_forward_tokens);
    const std::string last_piece = finish_text(s);
    if (s.options.on_text && !last_piece.empty()) {
      const InCallback in_callback(*s.window);
      s.options.on_text(last_piece);  // the run is over: not read
    }
    s.g.seconds = std::chrono::duration<double>(Clock::now() - s.t0).count();
    out.finished.emplace_back(s.id, std::move(s.g));
    if (s.slot >= 0) cache->close(s.slot);
  }
  running.erase(std::remove_if(running.begin(), running.end(), [](const auto& s) { return s->ending; }), running.end());
}

// Whether `s` is the only running sequence on its window: a read's plan may then change the window under it.
bool DecodeBatchState::sole_reader(const DecodeSequence& s) const {
  int64_t on_window = 0;
  for (const auto& r : running) on_window += r->window == s.window ? 1 : 0;
  return on_window == 1;
}

// The read's look (WindowPolicy::read_attention_weight): `s`'s first forward's attention re-plans its window
// (replan_for_read). When that plan changed the window's cached rows, the forward was only the look: its slot
// is closed, its tokens are counted with the read's (DecodeSequence::looked), and the query is read again
// after the repaired window at the next step (true). Otherwise (nothing re-served, or only the KV an instance
// already held) the forward read what the answer reads: it is the answer's first, at no extra cost.
bool DecodeBatchState::look_first(DecodeSequence& s, const at::Tensor& attention) {
  if (!replan_for_read(*s.window, attention_by_entry(*s.window, attention), "generate")) return false;
  s.looked += static_cast<int64_t>(s.input.size());
  cache->close(s.slot);
  s.slot = -1;
  s.past = read_past(*s.window, &s.pos);
  s.input = s.query;
  s.head.clear();
  reuse_query_head(*s.window, s.query, s.past, s.input, s.pos, s.head);
  s.read = read_key(*s.window);
  return true;
}

// One forward: each running sequence's input after its slot (opened at its first forward), except that
// sequences in their first step with the same read and query (a window and its forks asked the same) take
// the first one's result and a copy of its slot.
void DecodeBatchState::forward(DecodeStep& out) {
  if (cache == nullptr) cache = std::make_unique<runtime::DecodeCache>(core->model());
  std::vector<DecodeSequence*> live;
  std::vector<std::size_t> result_of;  // per live sequence: the forward whose result it takes
  std::vector<bool> shared;            // ... another sequence's
  std::vector<runtime::ForwardInput> inputs;
  std::vector<DecodeSequence*> owners;  // per forward: the sequence whose input it is
  std::map<std::tuple<DecodeReadKey, std::vector<int64_t>, int64_t>, std::size_t> first_steps;
  for (auto& s : running) {
    if (s->ending || s->held) continue;
    live.push_back(s.get());
    if (s->steps == 0) {
      const auto key = std::make_tuple(s->read, s->query, s->pos);
      const auto found = first_steps.find(key);
      if (found != first_steps.end()) {
        result_of.push_back(found->second);
        shared.push_back(true);
        continue;
      }
      first_steps.emplace(key, inputs.size());
    }
    if (s->slot < 0) {
      s->keeps = s->window->options.policy.reuse_computed;  // the query's and answer's KV, for exact reuse
      s->slot = cache->open(s->past.length() > 0 ? &s->past : nullptr, s->keeps);
      s->past = runtime::PastKV();
    }
    result_of.push_back(inputs.size());
    shared.push_back(false);
    inputs.push_back(core->registry().input_for_tokens(s->input, s->pos));
    owners.push_back(s.get());
    out.tokens += static_cast<int64_t>(s->input.size());
  }
  if (inputs.empty()) return;
  runtime::ForwardOptions fo, first;
  fo.return_content = first.return_content = false;  // a slot that keeps content holds it (keep_for_reuse)
  fo.logits = runtime::LogitsMode::kLast;
  first.logits = runtime::LogitsMode::kLast;
  first.key_attention = true;  // the query's forward: where it looks (record_attention)
  // The query's forward (thousands of tokens, a long question) stops between two layers under an
  // InterruptScope (engine/interruptible.h); a decode step's one token does not (on_token stops those). It
  // throws before anything of this step is kept: step() drops the batch's sequences and slots, and the
  // windows are as they were (record_attention, advance and keep_tail only run after the forward returns).
  first = interruptible(first);
  std::vector<runtime::PastKV> pasts;
  pasts.reserve(inputs.size());
  std::vector<runtime::SequenceForward> batch;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    pasts.push_back(cache->past(owners[k]->slot));
    batch.push_back({&inputs[k], &pasts.back(), owners[k]->steps == 0 ? &first : &fo});
  }
  const std::vector<runtime::ForwardResult> results = core->model().forward_batch(batch);
  out.sequences = static_cast<int64_t>(results.size());
  // Every row's logits on the host (the Sampler reads them there): a CPU model's as the forward returned them,
  // a device's copied at once.
  std::vector<at::Tensor> rows;
  for (const runtime::ForwardResult& r : results) rows.push_back(r.logits);
  if (!rows.front().is_cpu()) {
    const at::Tensor host = (rows.size() == 1 ? rows.front() : at::cat(rows, 0)).to(at::kCPU);
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = host.narrow(0, static_cast<int64_t>(i), 1);
  }
  for (std::size_t j = 0; j < live.size(); ++j) {
    const std::size_t i = result_of[j];
    if (shared[j]) {
      live[j]->slot = cache->fork(owners[i]->slot);  // the window and the query's rows, its own from here
      live[j]->keeps = owners[i]->keeps;
      live[j]->past = runtime::PastKV();
    }
    if (live[j]->steps == 0 && live[j]->look) {
      live[j]->look = false;
      if (!shared[j] && sole_reader(*live[j]) && look_first(*live[j], results[i].key_attention)) continue;
    }
    if (live[j]->steps == 0) record_attention(*live[j]->window, results[i].key_attention);
    advance(*live[j], rows[i], shared[j]);
  }
}

DecodeStep DecodeBatchState::step() {
  DecodeStep out;
  reads.clear();
  if (running.empty()) return out;
  const OpHold hold(*core);
  c10::InferenceMode guard;
  try {
    mark_endings_before_forward();
    forward(out);
    finish(out);
  } catch (...) {
    running.clear();
    cache.reset();
    throw;
  }
  return out;
}

}  // namespace detail

DecodeBatch::DecodeBatch() : state_(std::make_unique<detail::DecodeBatchState>()) {}
DecodeBatch::~DecodeBatch() = default;
DecodeBatch::DecodeBatch(DecodeBatch&&) noexcept = default;
DecodeBatch& DecodeBatch::operator=(DecodeBatch&&) noexcept = default;

uint64_t DecodeBatch::add(const GenerateRequest& request) {
  ORBIT_CHECK(request.window != nullptr, "generate: no window given");
  detail::WindowState& w = *request.window->state_;
  const detail::OpHold hold(*w.core);
  if (state_->core == nullptr) state_->core = w.core;
  ORBIT_CHECK(state_->core == w.core, "generate: window " << w.id << " belongs to another engine than the batch's");
  return state_->add(w, request.query, request.options);
}

DecodeStep DecodeBatch::step() { return state_->step(); }

void DecodeBatch::hold(uint64_t id, bool held) {
  for (auto& s : state_->running) {
    if (s->id != id) continue;
    s->held = held;
    return;
  }
  ORBIT_FAIL("DecodeBatch::hold: sequence " << id << " is not running in this batch");
}

int64_t DecodeBatch::size() const { return static_cast<int64_t>(state_->running.size()); }

std::vector<Generation> generate_many(const std::vector<GenerateRequest>& requests) {
  ORBIT_CHECK(requests.size() <= static_cast<std::size_t>(kMaxGenerateMany),
              "generate_many: requests: " << requests.size() << " requests, more than the " << kMaxGenerateMany
                                          << " one call takes (each is a sequence of one batch, added before it "
                                             "decodes); split them into several calls");
  DecodeBatch batch;
  std::map<uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    try {
      index[batch.add(requests[i])] = i;
    } catch (const Error& e) {
      throw Error("generate_many: request " + std::to_string(i) + ": " + e.what(), __FILE__, __LINE__);
    }
  }
  std::vector<Generation> out(requests.size());
  while (!batch.empty()) {
    for (auto& [id, g] : batch.step().finished) out[index.at(id)] = std::move(g);
  }
  return out;
}

Generation Window::generate(const std::vector<int64_t>& query, const GenerateOptions& options) const {
  const detail::OpHold hold(*state_->core);
  DecodeBatch batch;
  batch.add({this, query, options});
  Generation g;
  while (!batch.empty()) {
    DecodeStep s = batch.step();
    if (!s.finished.empty()) g = std::move(s.finished.front().second);
  }
  return g;
}

std::vector<Generation> Window::generate_n(const std::vector<int64_t>& query, int64_t n,
                                           const GenerateOptions& options) const {
  const detail::OpHold hold(*state_->core);
  ORBIT_CHECK(n >= 1, "generate_n: n = " << n << " must be >= 1");
  ORBIT_CHECK(n <= kMaxGenerateN, "generate_n: n = " << n << " must be <= " << kMaxGenerateN
                                                     << " (each answer decodes on a fork of the window)");
  detail::check_query(*state_, query, "generate");
  detail::make_sampler(*state_->core, options, query);                   // checks the options before anything changes
  const int64_t looked = detail::plan_read(*state_, query, "generate");  // once: the forks share the repaired KV
  std::vector<Window> forks;
  forks.reserve(static_cast<std::size_t>(n - 1));
  for (int64_t i = 1; i < n; ++i) forks.push_back(fork());
  // Each window's decode starts from the read planned above, not a probe of its own.
  state_->read_planned = looked;  // counted once, for the first answer
  for (Window& f : forks) f.state_->read_planned = 0;
  std::vector<GenerateRequest> requests{{this, query, options}};
  for (int64_t i = 1; i < n; ++i) {
    GenerateOptions branch = options;
    branch.seed = Window::answer_seed(options.seed, i);
    requests.push_back({&forks[static_cast<std::size_t>(i - 1)], query, std::move(branch)});
  }
  return generate_many(requests);
}

}  // namespace orbit
