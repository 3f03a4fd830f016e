// RequestPath's second half: a prepared request run (request_path.h): a chat request's sync under the gate,
// its decode with the tool-call and reasoning sinks, its usage and the session's record; a completion's admit
// and decode.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <set>
#include <utility>

#include "orbit/capacity.h"
#include "orbit/common/error.h"
#include "orbit/forward_pieces.h"
#include "orbit/interrupt.h"
#include "serve/run/decode.h"
#include "serve/run/reasoning_sink.h"
#include "serve/run/request_path.h"
#include "serve/run/request_ticket.h"
#include "serve/run/room_maker.h"
#include "serve/run/tool_stream.h"

namespace orbit::serve {

namespace {

std::string plan_brief(const SyncPlan& plan) {
  std::string out;
  auto add = [&](const char* what, int64_t n) {
    if (n == 0) return;
    if (!out.empty()) out += ", ";
    out += std::string(what) + " " + std::to_string(n);
  };
  add("keep", plan.count(SyncAction::kKeep));
  add("admit", plan.count(SyncAction::kAdmit));
  add("recall", plan.count(SyncAction::kRecall));
  add("turn", plan.count(SyncAction::kTurn));
  add("evict", static_cast<int64_t>(plan.evict.size()));
  if (plan.reorder) out += out.empty() ? "reorder" : ", reorder";
  return out.empty() ? "nothing" : out;
}

// The repairs the sync deferred, run now in this quantum (the read would run them first), planned once.
// Returns that plan's predicted KL, which the window then carries (a keep plan's when none wait).
double run_deferred_repairs(Window& window) {
  const Plan plan = window.plan_flush();
  const std::vector<InstanceInfo> instances = window.instances();
  const bool waiting =
      std::any_of(instances.begin(), instances.end(), [](const InstanceInfo& i) { return i.deferred; });
  if (waiting) {  // else applying the keep plan would be an operation of its own
    const Result<ApplyReport> applied = window.apply(plan);
    ORBIT_CHECK(applied.is_ok(), "serve: the repairs the sync deferred could not run: " << applied.status().reason());
  }
  return plan.predicted_kl;
}

// The engine's radix yardstick for what a window read between two of its stats (serve_core.h).
int64_t radix_delta(const WindowStats& before, const WindowStats& after) {
  return std::llround(after.radix_cache_tokens - before.radix_cache_tokens);
}

// How many of `tokens` write the first `bytes` bytes of their text (read after `previous`, as decode reads
// them): the fewest whose text reaches that far, found by halving (a prefix's text grows with it).
int64_t tokens_writing(const Engine& engine, const std::vector<int64_t>& tokens, std::size_t bytes, int64_t previous) {
  std::size_t lo = 0, hi = tokens.size();
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    const std::vector<int64_t> prefix(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(mid));
    if (engine.detokenize(prefix, previous).size() >= bytes) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return static_cast<int64_t>(lo);
}

// `sync` (a request's sync or admit, holding the gate on `lane`) run with its prefill in pieces of at most
// ServeOptions::prefill_chunk tokens (orbit/forward_pieces.h). Between two pieces a decode step waiting for the
// gate takes it for one step (FairGate::yield_to), then a short sync of another session waiting for it runs whole
// as a guest (FairGate::yield_to_guest: its new tokens at most one piece), then the sync goes on holding it: no
// other waiter and no idle work runs meanwhile. The sync runs on the compute thread; a guest runs on the guest
// compute thread (the compute thread is blocked in the yield), and yields only to decode steps between its own
// pieces, if it has any. A client that left by then ends the sync there (orbit::Interrupted: the window keeps
// nothing of the plan under way). False: it ended so.
bool run_in_pieces(ServeContext& context, const std::string& lane, const std::function<bool()>& cancelled,
                   const std::function<void()>& sync) {
  const bool guest = context.gate.nested();  // let in between another sync's pieces
  ComputeThread& thread = guest ? context.guest_compute : context.compute;
  try {
    thread.run([&] {
      ForwardPieces pieces(context.options.prefill_chunk, [&] {
        context.gate.yield_to(kDecodeLane);
        if (!guest) context.gate.yield_to_guest(lane, context.options.prefill_chunk);
        if (cancelled && cancelled()) throw Interrupted("sync");
      });
      sync();
    });
  } catch (const Interrupted&) {
    return false;
  }
  return true;
}

// The tokens `plan` forwards in its sync, as a guest offers them (FairGate::enter): its new units' tokens (a
// stored chunk admitted from the store forwards fewer). A plan that evicts or reorders may defer repairs whose
// forwards the sync runs too (run_deferred_repairs), of a size the plan does not say: no offer. A session in exact
// mode heals `healed` (its window, as it is before the sync) after the sync: the heal re-forms every unit from
// the first that is not kept exact, whose tokens are offered too, so such a guest is let in only when its heal
// fits the piece it is given as well.
int64_t guest_tokens(const SyncPlan& plan, const Window* healed) {
  if (plan.reorder || !plan.evict.empty()) return FairGate::kNoGuest;
  std::set<InstanceId> exact;
  if (healed != nullptr) {
    for (const InstanceInfo& i : healed->instances()) {
      if (i.exact) exact.insert(i.id);
    }
  }
  int64_t tokens = 0;
  bool healing = false;  // from the first unit the heal re-forms on
  for (const SyncUnit& unit : plan.units) {
    const bool kept = unit.action == SyncAction::kKeep;
    healing = healing || (healed != nullptr && !(kept && exact.count(unit.instance) > 0));
    const auto n = static_cast<int64_t>(unit.tokens.size());
    tokens += (kept ? 0 : n) + (healing ? n : 0);
  }
  return tokens;
}

// window.admit(chunk), a refusal for capacity thrown as orbit::CapacityRefused (Window::admit throws a plain
// orbit::Error), as Window::sync throws it: bound kPool, for a completion's window has no max_bytes of its own
// (ServeContext::new_window).
void admit_chunk(Window& window, const ChunkRef& chunk) {
  const Plan plan = window.plan_admit(chunk);
  const Result<ApplyReport> applied = window.apply(plan);
  if (applied.is_ok()) return;
  if (applied.status().code() == StatusCode::kOutOfCapacity) {
    throw CapacityRefused(applied.status().reason(), CapacityRefused::Bound::kPool, __FILE__, __LINE__,
                          plan.pool_pages_short);
  }
  throw Error(applied.status().reason(), __FILE__, __LINE__);
}

// The chunk keys `plan`'s units place (every unit but a turn): a canonical set of theirs that only waiting audits hold
// is no room for the sync, which writes it anew (room_maker.h).
std::vector<std::string> placed_chunks(const SyncPlan& plan) {
  std::vector<std::string> keys;
  for (const SyncUnit& u : plan.units) {
    if (!u.is_turn && !u.key.empty()) keys.push_back(u.key);
  }
  return keys;
}

// The tokens of each unit `plan` leaves in the window.
std::vector<int64_t> unit_sizes(const SyncPlan& plan) {
  std::vector<int64_t> sizes;
  for (const SyncUnit& unit : plan.units) sizes.push_back(static_cast<int64_t>(unit.tokens.size()));
  return sizes;
}

RunOutcome cancelled_before_decode() {
  RunOutcome out;
  out.result = RunResult{};
  out.result->finish_reason = "cancelled";
  return out;
}

// What choice `choice`'s ToolCallStream let out of `delta`, to `sink`: the content (to on_text, or with n > 1
// on_choice_text), then each piece of a call; false: the client left.
bool pass_on(ToolCallStream& calls, const RunSink& sink, int64_t choice, const std::string& delta) {
  const ToolStreamOut now = calls.push(delta);
  if (!now.content.empty() &&
      !(sink.on_choice_text ? sink.on_choice_text(choice, now.content) : sink.on_text(now.content))) {
    return false;
  }
  for (const ToolCallDelta& d : now.calls) {
    if (!sink.on_tool_call(choice, d)) return false;
  }
  return true;
}

// `sink` with each choice's text read for tool calls on its way (one ToolCallStream per choice, in `calls`,
// which must outlive the returned sink): content goes on only up to where a call may start; the calls go to
// sink.on_tool_call as they are written where `calls_whole` (AnswerConstraint::calls_whole) and the sink takes
// them, else whole at the choice's end (RunResult::unstreamed_calls).
RunSink tool_call_sink(const RunSink& sink, const ChatRequest& request, ToolCallFormat format, bool calls_whole,
                       std::vector<ToolCallStream>& calls) {
  AnswerCallsOptions read;
  read.format = format;
  read.forced = request.tool_choice.mode == "required" || request.tool_choice.mode == "function";
  // A call or the JSON answer, both from the first byte (AnswerConstraint's calls or answer).
  read.calls_or_json = calls_whole && request.tool_choice.mode == "auto" && request.response_format.type != "text";
  read.one_call = !request.parallel_tool_calls;
  if (calls_whole) read.names = grammar_tool_names(request);
  read.tools = grammar_tool_names(request);  // the names a call may have, free or not
  const bool progressive = calls_whole && sink.on_tool_call != nullptr;
  calls.assign(static_cast<std::size_t>(std::max<int64_t>(1, request.sampling.n)),
               ToolCallStream(std::move(read), progressive));
  RunSink out = sink;
  if (sink.on_text) {
    out.on_text = [&calls, sink](const std::string& delta) { return pass_on(calls[0], sink, 0, delta); };
  }
  if (sink.on_choice_text) {
    out.on_choice_text = [&calls, sink](int64_t choice, const std::string& delta) {
      return pass_on(calls[static_cast<std::size_t>(choice)], sink, choice, delta);
    };
  }
  return out;
}

// What the session keeps of a chat run (SessionTable::record): its usage, whether it answered, and, for an
// anonymous session or one that anticipates an answered request, the list the next request most likely
// sends (the messages and the answer as the client will send it back), kept to match anonymous requests and
// to anticipate.
RunRecord chat_record(const ChatRequest& request, const SyncOptions& options, const RunResult& r,
                      const std::string& session, bool anticipate) {
  RunRecord record;
  record.usage = r.usage;
  record.answered = r.finish_reason != "cancelled" &&
                    (!r.text.empty() || !r.tool_calls.empty() || (r.reasoning && !r.reasoning->empty()));
  record.options = options;
  if (session.empty() || (anticipate && record.answered)) {
    record.next = request.messages;
    if (record.answered) {
      ChatMessage answer;
      answer.role = "assistant";
      answer.content = r.text;
      answer.tool_calls = r.tool_calls;  // as the client will send them back
      if (r.reasoning && !r.reasoning->empty()) answer.reasoning_content = *r.reasoning;
      record.next.push_back(std::move(answer));
    }
  }
  return record;
}

// What the synced window reads (SyncedRead): whether its every instance holds the KV a re-prefill would give it
// (as far as it tracks), so a read now loses nothing against one; and whether `plan` kept units behind a first
// unit it formed anew.
SyncedRead synced_read(const Window& window, const SyncPlan& plan) {
  const std::vector<InstanceInfo> instances = window.instances();
  SyncedRead read;
  read.exact_kv = std::all_of(instances.begin(), instances.end(), [](const InstanceInfo& i) { return i.exact; });
  const auto kept = [](const SyncUnit& u) { return u.action == SyncAction::kKeep; };
  read.behind_new_front = !read.exact_kv && !plan.units.empty() && !kept(plan.units.front()) &&
                          std::any_of(plan.units.begin() + 1, plan.units.end(), kept);
  return read;
}

}  // namespace

ApiError RequestPath::run_failure(const Error& e) const {
  if (!context_.closing) return engine_failure(e);
  // The server's close ended the engine under this run (a second signal ends the drain at once): the answer was
  // cut by the shutdown, which is what the client is told, not an engine failure.
  return api_error(
      503,
      std::string("the server shut down before this answer was complete (") + e.what() + "); send the request again",
      "server_error", "server_shutdown");
}

RunOutcome RequestPath::run(RunTicket& ticket, const RunSink& sink) {
  RunOutcome out;
  if (!ticket.ok()) {
    out.error = ticket.error();
    return out;
  }
  try {
    out = ticket.prepared_->chat ? run_chat(*ticket.prepared_, sink) : run_completion(*ticket.prepared_, sink);
  } catch (const Error& e) {
    out = RunOutcome{};
    out.error = run_failure(e);
  }
  ticket.prepared_.reset();  // the window back to its session
  ticket.error_ = api_error(500, "serve: this request has run already", "server_error");
  const bool cut = out.result && out.result->finish_reason == "cancelled";
  if (cut && context_.closing && !(sink.cancelled && sink.cancelled())) {
    // The server closed under a client that is still there: the answer is incomplete, and saying so is an
    // error, never an answer that looks whole.
    const int64_t made = out.result->usage.completion_tokens;
    out = RunOutcome{};
    out.error = api_error(503,
                          "the server shut down before this answer was complete (" + std::to_string(made) +
                              " token(s) generated); send the request again",
                          "server_error", "server_shutdown");
  } else if (cut) {
    context_.metrics.count_cancelled();
  }
  return out;
}

// The window synced by the plan prepare made (no second rendering). A sync the KV pool refuses
// (orbit::CapacityRefused, bound kPool) first checks that the window it would leave fits the pool at all
// (check_pool_holds: else PoolTooSmall, a 400, and nothing is let go); then it lets the least recently used idle
// window go (SessionTable::let_go_idle) and is planned and tried again on the window as the refusal left it, until
// it fits or no idle window is left. Then the oldest waiting audit whose fork alone holds pages is dropped
// (Auditor::drop_for_pool), one at a time, tried again after each, so the request drops only as many as it lacks
// pages for and the others wait on: its fork holds the pages it shares with its window until idle time runs it, and
// under this pressure idle time does not come; running it first instead would hold the gate for its two reads,
// one a re-prefill of the whole window, on this request's critical path, for a sampled measurement (the drop is
// counted in /metrics). Then, once, the requester's own window is renewed (SessionTable::renew_window:
// its old units hold pages until the sync commits, so an edit of a long message needs both the old unit's pages
// and the new one's) and the sync is planned from the empty window (`before`, the usage's starting point, becomes
// the new window's). A last refusal is thrown (engine_failure answers it 503 kv_pool_full: what holds the pages
// now is other requests' windows). A refusal for the window's own bound (kWindowBytes) is thrown at once: no other
// window's room cures it.
SyncReport RequestPath::sync_making_room(RunTicket::Prepared& p, WindowStats& before) {
  RoomMaker make_room(
      context_, sessions_, &p.slot.session(),
      [&] { check_pool_holds(unit_sizes(p.plan), "this conversation's window", "messages"); },
      [&] {
        if (p.slot.window().instances().empty()) return false;
        sessions_.renew_window(p.slot.session());
        before = p.slot.window().stats();
        return true;
      });
  make_room.places(placed_chunks(p.plan));
  if (!p.replan) {
    try {
      return p.slot.window().sync(p.chat->messages, p.plan);
    } catch (const CapacityRefused& e) {
      if (!make_room(e)) throw;
    }
  }
  for (;;) {
    try {
      return p.slot.window().sync(p.chat->messages, p.plan.options);
    } catch (const CapacityRefused& e) {
      if (!make_room(e)) throw;
    }
  }
}

void RequestPath::check_pool_holds(const std::vector<int64_t>& units, const std::string& what,
                                   const std::string& param) const {
  const int64_t page = context_.engine->options().page_size;
  int64_t tokens = 0, pages = 0;
  for (const int64_t n : units) {  // each unit's KV in whole pages of its own
    tokens += n;
    pages += (n + page - 1) / page;
  }
  const int64_t total = context_.engine->stats().pool_pages;
  if (pages <= total) return;
  throw PoolTooSmall(what + " needs " + std::to_string(pages) + " KV pages (" + std::to_string(tokens) + " tokens in " +
                         std::to_string(units.size()) + " unit(s), pages of " + std::to_string(page) +
                         " tokens) and the whole KV pool has " + std::to_string(total),
                     param, __FILE__, __LINE__);
}

// Under the gate: the request counted for owed audits (audit.h; ServeCore::run runs one after the answer), the
// window synced to the messages by the plan prepare made, the deferred repairs run, and the session healed or
// queued for an audit as it is served. False: the client left before its turn.
bool RequestPath::sync_chat(RunTicket::Prepared& p, const RunSink& sink, ChatSync& out) {
  Session& s = p.slot.session();
  GateTurn turn(context_, s.lane, sink.cancelled,
                guest_tokens(p.plan, sessions_.exact_pending(s) ? &p.slot.window() : nullptr));
  if (!turn.enter()) return false;
  const bool guest = context_.gate.nested();  // let in between two pieces of another session's sync
  return run_in_pieces(context_, s.lane, sink.cancelled, [&] {
    if (!p.replan) context_.auditor.count_request();  // once, however many times a full pool has it wait
    out.report = sync_making_room(p, out.before);
    Window& window = p.slot.window();  // after the sync: it may have renewed the window
    out.predicted_kl = run_deferred_repairs(window);
    // A guest was let in for the tokens it offered, at most one piece. Its offer counted exact mode's heal when the
    // session was in exact mode then; one that entered it since (an audit that ended meanwhile) and whose heal runs
    // past a piece does not heal here, holding up the sync that let it in: it is served as it is, and exact mode
    // starts with the session's next request (SessionTable::serving).
    const bool may_heal = !guest || !sessions_.exact_pending(s) ||
                          window.plan_heal().forward_tokens <= static_cast<double>(context_.options.prefill_chunk);
    out.mode = sessions_.serving(s, may_heal, synced_read(window, out.report.plan));
    if (out.mode.exact) {
      window.heal();  // an audit found this session's loss past its budget: read as a re-prefill would be
      out.predicted_kl = 0;
    }
    if (out.mode.audit) {
      queue_audit(p.slot.shared_session(), out.mode.request, out.report.generation_prompt, out.predicted_kl);
    }
  });
}

// The chat answer decoded after `generation_prompt` on the synced window. With tools, each choice's answer is
// read for calls: content streams up to where a call may start, and the calls are read out as the choice
// ends. Under a reasoning parser the reasoning is split off first: calls and content are read after it.
RunResult RequestPath::decode_chat(RunTicket::Prepared& p, const std::vector<int64_t>& generation_prompt,
                                   const RunSink& sink) {
  const ChatRequest& request = *p.chat;
  std::vector<ToolCallStream> calls;
  RunSink out_sink =
      request.reads_tool_calls() ? tool_call_sink(sink, request, context_.tool_format, p.calls_whole, calls) : sink;
  std::optional<ReasoningRun> reasoning;
  if (context_.options.reasoning != ReasoningFormat::kNone) {
    const int64_t previous = generation_prompt.back();
    reasoning.emplace(p.in_reasoning, request.sampling.n,
                      [this, previous](const std::vector<int64_t>& tokens, std::size_t bytes) {
                        return tokens_writing(*context_.engine, tokens, bytes, previous);
                      });
    out_sink = reasoning->wrap(sink, out_sink);
  }
  DecodeRequest decoding{&generation_prompt, &request.sampling, p.constraint, p.trigger, p.trigger_block};
  if (!calls.empty() || reasoning) {
    decoding.read_choice = [this, &calls, &reasoning](int64_t choice, RunResult& r) {
      const bool past_reasoning = !reasoning || reasoning->finish(choice, r);
      if (calls.empty() || !past_reasoning) return;
      calls[static_cast<std::size_t>(choice)].finish(r);
      if (r.tool_stream_mismatch) report_mismatch(*r.tool_stream_mismatch, choice);
      if (r.tool_calls_dropped > 0) {  // parallel_tool_calls false over a free answer: said, not silent
        std::fprintf(stderr,
                     "orbit serve: choice %lld wrote %zu tool calls; parallel_tool_calls is false, so only the first "
                     "is answered\n",
                     static_cast<long long>(choice), r.tool_calls_dropped + 1);
      }
    };
  }
  RunResult r = decode(context_, p.slot.window(), decoding, out_sink);
  if (reasoning) {  // every choice's
    int64_t all = r.usage.reasoning_tokens.value_or(0);
    for (const RunResult& extra : r.extra_choices) all += extra.usage.reasoning_tokens.value_or(0);
    r.usage.reasoning_tokens = all;
  }
  return r;
}

// Runs `attempt` (a request's sync or admit under the gate, making room as it goes: RoomMaker) until the KV pool
// holds it. A refusal for the pool once nothing is left to let go waits, outside the gate (the running requests
// need it to finish), for a request to release its window and tries again, up to ServeOptions::pool_wait_ms
// (SessionTable::wait_for_release: not at all when no other request is running). When no request is left to wait
// for (or the wait is over, at once with --pool-wait-ms 0), waiting audits that the sync kept are dropped too, oldest
// first, each followed by a try, but only those whose forks hold pages that dropping every waiting audit together
// gives back (drop_together: forks may share their pages with one another, so that none alone frees any, yet
// together they do; none starves the request). One whose every page a running request's window holds gives no room,
// and is kept; so are all of them where together they free fewer pages than the refusal says the request lacks
// (CapacityRefused::pages_short). None left to drop, the refusal is thrown (503 kv_pool_full) and the audits wait on.
// False: the client left before its turn, or while it waited.
bool RequestPath::waiting_for_pool(const Session* self, const std::vector<std::string>& placed_again,
                                   const std::function<bool()>& cancelled, const std::function<bool()>& attempt) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(context_.options.pool_wait_ms);
  for (;;) {
    const uint64_t seen = sessions_.releases();
    try {
      return attempt();
    } catch (const CapacityRefused& e) {
      if (e.bound() != CapacityRefused::Bound::kPool) throw;
      const SessionTable::Wait waited = sessions_.wait_for_release(self, seen, deadline, cancelled);
      if (waited == SessionTable::Wait::kGiveUp && cancelled && cancelled()) return false;
      // No request holds the pages: an idle window the idle worker held (which the sync under the gate skips) is
      // let go now, outside the gate, once the worker's slice ends; else a waiting audit the sync kept (a window
      // copy closed here, as let_go_idle closes a window); with neither, nothing is left to give back (the sync let
      // every other idle window go): the refusal stands.
      if (waited == SessionTable::Wait::kReleased) continue;
      if (waited == SessionTable::Wait::kIdle && sessions_.let_go_idle(self, true)) continue;
      if (!context_.auditor.drop_for_pool(drop_together(placed_again, e.pages_short()))) throw;
    }
  }
}

// The chat request's sync (sync_chat), with its window's stats before it for the usage: p.synced, or p.left
// when the client left before its turn (or while it waited for the pool: waiting_for_pool).
void RequestPath::sync_first(RunTicket::Prepared& p, const RunSink& sink) {
  ChatSync synced;
  synced.before = p.slot.window().stats();
  bool tried = false;
  const bool ran = waiting_for_pool(&p.slot.session(), placed_chunks(p.plan), sink.cancelled, [&] {
    p.replan = p.replan || tried;  // refused for the pool, it waited: the plan may be stale
    tried = true;
    return sync_chat(p, sink, synced);
  });
  if (ran) {
    p.synced = std::move(synced);
  } else {
    p.left = true;
  }
}

std::optional<ApiError> RequestPath::sync_ahead(RunTicket& ticket, const std::function<bool()>& cancelled) {
  if (!ticket.ok()) return std::nullopt;
  RunTicket::Prepared& p = *ticket.prepared_;
  if (p.synced || p.admitted || p.left) return std::nullopt;
  RunSink sink;
  sink.cancelled = cancelled;
  try {
    if (p.chat != nullptr) {
      sync_first(p, sink);
    } else {
      admit_first(p, sink);
    }
    return std::nullopt;
  } catch (const Error& e) {
    ticket.prepared_.reset();  // the window back to its session, as run() leaves it after a failure
    ticket.error_ = run_failure(e);
    return ticket.error_;
  }
}

RunOutcome RequestPath::run_chat(RunTicket::Prepared& p, const RunSink& sink) {
  Session& s = p.slot.session();
  if (!p.synced && !p.left) sync_first(p, sink);  // else sync_ahead ran it
  if (p.left) return cancelled_before_decode();
  const ChatSync& synced = *p.synced;
  const WindowStats& before = synced.before;
  RunResult r = decode_chat(p, synced.report.generation_prompt, sink);
  const WindowStats after = p.slot.window().stats();  // the sync may have renewed the window (sync_making_room)
  RunUsage& u = r.usage;
  u.prompt_tokens = prompt_tokens(synced.report.plan);
  u.forward_tokens =
      after.critical_forward_tokens - before.critical_forward_tokens + static_cast<double>(r.prompt_forward_tokens);
  u.radix_cache_tokens = radix_delta(before, after);
  u.predicted_kl = synced.predicted_kl;
  u.idle_forward_tokens = sessions_.take_idle_forward_tokens(s);
  u.plan = plan_brief(synced.report.plan);
  u.session = s.id;
  u.audit = sessions_.take_audit(s, synced.mode.request);
  if (synced.mode.exact) u.exact = "audit";
  u.exact_kv = synced.mode.exact_kv;
  sessions_.record(s, chat_record(*p.chat, p.options, r, s.id, context_.options.anticipate));
  RunOutcome out;
  out.result = std::move(r);
  return out;
}

// A streamed call its answer does not hold as it went out: counted in /metrics and logged with both texts.
void RequestPath::report_mismatch(const ToolStreamMismatch& m, int64_t choice) {
  context_.metrics.count_tool_stream_mismatch(m.what);
  const ApiError e = tool_stream_error(m, choice);
  std::fprintf(stderr, "orbit serve: %s (streamed name '%s', arguments %s; the answer's name '%s', arguments %s)\n",
               e.message.c_str(), m.name.c_str(), m.streamed.c_str(), m.answered_name.c_str(), m.answered.c_str());
}

// The window as the answer reads it, forked for an audit in idle time (audit.h). Holding the gate.
void RequestPath::queue_audit(std::shared_ptr<Session> s, int64_t request, const std::vector<int64_t>& query,
                              double predicted_kl) {
  AuditCase c;
  c.fork.emplace(s->window->fork());
  c.session = std::move(s);
  c.request = request;
  c.query = query;
  c.predicted_kl = predicted_kl;
  c.budget = context_.policy.kl_budget > 0 ? context_.policy.kl_budget : kDefaultKlBudget;
  context_.auditor.submit(std::move(c));
}

// Under the gate on `lane`, in pieces: the completion's prompt but its last token admitted to `window` as one chunk
// (an identical prompt is served from the store), registered once the turn is ours, right before the admit (a chunk
// no window holds may be forgotten meanwhile, ServeOptions::max_idle_chunks). A refusal for the pool makes room as a
// chat request's sync does (RoomMaker; a prompt over the whole pool is PoolTooSmall). False: the client left.
bool RequestPath::admit_completion(RunTicket::Prepared& p, const std::string& lane, Window& window,
                                   const RunSink& sink) {
  const std::vector<int64_t> prefix(p.tokens.begin(), p.tokens.end() - 1);
  if (prefix.empty()) return true;  // the query alone
  GateTurn turn(context_, lane, sink.cancelled, static_cast<int64_t>(prefix.size()));
  if (!turn.enter()) return false;
  RoomMaker make_room(context_, sessions_, nullptr, [&] {
    check_pool_holds({static_cast<int64_t>(prefix.size())}, "this prompt (but its last token)", "prompt");
  });
  return run_in_pieces(context_, lane, sink.cancelled, [&] {
    const ChunkRef chunk = context_.engine->add_tokens(prefix, ChunkOptions{});
    make_room.places({chunk.key});
    for (;;) {
      try {
        return admit_chunk(window, chunk);
      } catch (const CapacityRefused& e) {
        if (!make_room(e)) throw;
      }
    }
  });
}

void RequestPath::admit_first(RunTicket::Prepared& p, const RunSink& sink) {
  p.held = sessions_.hold_outside();  // from here until its window closes, a running request's to those waiting
  const std::string lane = "~completion:" + std::to_string(++lanes_);
  Window window = context_.new_window();
  const WindowStats before = window.stats();
  // No chunk keys: the prompt's chunk is registered under the gate (admit_completion), and a chat audit's fork
  // rarely places it.
  if (waiting_for_pool(nullptr, {}, sink.cancelled, [&] { return admit_completion(p, lane, window, sink); })) {
    p.admitted.emplace(CompletionAdmit{std::move(window), before});
  } else {
    p.left = true;
  }
}

RunOutcome RequestPath::run_completion(RunTicket::Prepared& p, const RunSink& sink) {
  if (!p.admitted && !p.left) admit_first(p, sink);  // else sync_ahead ran it
  if (p.left) return cancelled_before_decode();
  Window& window = p.admitted->window;
  const WindowStats& before = p.admitted->before;
  const std::vector<int64_t> query{p.tokens.back()};
  RunResult r = decode(context_, window, DecodeRequest{&query, &p.completion_sampling}, sink);
  const WindowStats after = window.stats();
  r.usage.prompt_tokens = static_cast<int64_t>(p.tokens.size());
  r.usage.forward_tokens =
      after.critical_forward_tokens - before.critical_forward_tokens + static_cast<double>(r.prompt_forward_tokens);
  r.usage.radix_cache_tokens = radix_delta(before, after);
  r.usage.plan = p.tokens.size() == 1 ? "query only" : "prompt as one chunk";
  RunOutcome out;
  out.result = std::move(r);
  return out;
}

}  // namespace orbit::serve
