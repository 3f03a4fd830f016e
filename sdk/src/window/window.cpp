// Window's public methods: state queries, the plan_* builders (each turns an operation into a Layout
// for plan_layout), apply, the plan-and-apply shortcuts and fork. Idle-time work is window_idle.cpp, the read's look
// before a read window_look.cpp.
#include "orbit/window.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "engine/engine_plan_env.h"
#include "engine/interruptible.h"
#include "orbit/capacity.h"
#include "orbit/common/error.h"
#include "orbit/planner/placement.h"
#include "window/window_ops.h"

namespace orbit {

using detail::current_layout;
using detail::Entry;
using detail::Layout;
using detail::must;
using detail::served_again;
using detail::Slot;
using detail::WindowState;

namespace {

std::string name_of(const Entry& e) {
  if (e.is_turn) return "turn #" + std::to_string(e.id);
  const ChunkRef r = e.ref();
  return r.label.empty() ? "chunk " + r.key.substr(0, 8) : "chunk '" + r.label + "'";
}

std::string name_of(const ChunkRef& r) {
  return r.label.empty() ? "chunk " + r.key.substr(0, 8) : "chunk '" + r.label + "'";
}

std::size_t insertion_index(const WindowState& s, InstanceId before, const char* what) {
  if (before == 0) return s.entries.size();
  const int64_t i = s.index_of(before);
  ORBIT_CHECK(i >= 0, what << ": `before` names instance " << before << ", which window " << s.id << " does not hold");
  return static_cast<std::size_t>(i);
}

// Instances a plan serves again (every step that does not keep its instance as it is).
}  // namespace

Window::Window(std::unique_ptr<WindowState> state) : state_(std::move(state)) { state_->core->life().window_opened(); }
Window::Window(Window&&) noexcept = default;
Window& Window::operator=(Window&& other) noexcept {
  if (this != &other) {
    if (state_) state_->core->life().window_closed();
    state_ = std::move(other.state_);
  }
  return *this;
}
Window::~Window() {
  if (state_ && state_->core->life().forked()) {
    // A child of fork(): the window's pages belong to the parent's pool, whose lock a parent thread may have
    // held at the fork; left as they are (EngineLife::forked).
    (void)state_.release();
    return;
  }
  if (state_) state_->core->life().window_closed();
}

uint64_t Window::id() const { return state_->id; }
const WindowOptions& Window::options() const { return state_->options; }
const WindowPolicy& Window::policy() const { return state_->options.policy; }
void Window::set_policy(const WindowPolicy& policy) {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, "set_policy");
  validate_policy(policy);
  state_->options.policy = policy;
  ++state_->version;  // plans made under the old policy are stale
}
int64_t Window::tokens() const {
  const detail::OpHold hold(*state_->core);
  return state_->tokens();
}
uint64_t Window::version() const { return state_->version; }

std::vector<InstanceInfo> Window::instances() const {
  const detail::OpHold hold(*state_->core);
  std::vector<InstanceInfo> out;
  int64_t position = 0;
  const std::vector<uint64_t> contexts = state_->context_hashes();
  for (std::size_t i = 0; i < state_->entries.size(); ++i) {
    const Entry& e = state_->entries[i];
    InstanceInfo info;
    info.id = e.id;
    info.chunk = e.ref();
    info.is_turn = e.is_turn;
    info.turn_tokens = e.turn_tokens;
    info.position = position;
    info.length = e.length;
    info.formed_by = e.formed_by;
    info.match = e.match;
    info.context_changed = e.formed_on != contexts[i];
    info.exact = e.exact_when_formed && !info.context_changed;
    info.patch_key = e.patch_key;
    info.deferred = e.deferred;
    info.attention = e.attention;
    out.push_back(info);
    position += e.extent;
  }
  return out;
}

std::optional<InstanceInfo> Window::instance(InstanceId id) const {
  for (const InstanceInfo& i : instances()) {
    if (i.id == id) return i;
  }
  return std::nullopt;
}

std::vector<ChunkRef> Window::evicted() const {
  const detail::OpHold hold(*state_->core);
  std::vector<ChunkRef> out;
  for (const auto& [key, chunk] : detail::live_evictions(*state_)) out.push_back(chunk->ref);
  return out;
}

WindowStats Window::stats() const {
  const detail::OpHold hold(*state_->core);
  WindowStats s;
  s.instances = static_cast<int64_t>(state_->entries.size());
  std::vector<const runtime::PagedSequence*> seqs;
  for (const Entry& e : state_->entries) seqs.push_back(e.kv.get());
  const int64_t shared = state_->core->pool().shared_pages(seqs);
  for (const Entry& e : state_->entries) {
    s.turns += e.is_turn ? 1 : 0;
    s.chunk_instances += e.is_turn ? 0 : 1;
  }
  s.tokens = state_->tokens();
  s.device_bytes = state_->device_bytes();
  s.shared_pages = shared;
  s.past_bytes = state_->past != nullptr ? state_->past->bytes() : 0;
  s.evicted = static_cast<int64_t>(detail::live_evictions(*state_).size());
  s.forward_tokens = state_->forward_tokens;
  s.critical_forward_tokens = state_->critical_forward_tokens;
  s.prefix_cache_tokens = state_->prefix_cache_tokens;
  s.radix_cache_tokens = state_->radix_cache_tokens;
  s.query_forward_tokens = state_->query_forward_tokens;
  s.logits_forward_tokens = state_->logits_forward_tokens;
  s.operations = state_->operations;
  return s;
}

// ---- planning ------------------------------------------------------------------------------------

Plan Window::plan_admit(const ChunkRef& chunk, InstanceId before) const {
  const detail::OpHold hold(*state_->core);
  const detail::ChunkPtr held = state_->core->registry().record(chunk);
  const detail::ChunkRecord& rec = *held;
  for (const Entry& e : state_->entries) {
    ORBIT_CHECK(e.is_turn || e.key != rec.ref.key,
                "admit: " << name_of(rec.ref) << " is already in window " << state_->id << " as instance " << e.id);
  }
  Layout l = current_layout(*state_, Operation::kAdmit);
  Slot sl;
  sl.id = state_->core->next_instance_id();
  sl.chunk = held;
  const std::size_t at = insertion_index(*state_, before, "admit");
  l.slots.insert(l.slots.begin() + static_cast<std::ptrdiff_t>(at), sl);
  l.change_reason = name_of(rec.ref) + " inserted before it";
  return detail::plan_layout(*state_, l);
}

Plan Window::plan_add_turn(const std::vector<int64_t>& tokens) const {
  const detail::OpHold hold(*state_->core);
  const int64_t vocab = state_->core->config().vocab_size;
  ORBIT_CHECK(!tokens.empty(), "add_turn: empty turn (a turn needs at least one token)");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    ORBIT_CHECK(tokens[i] >= 0 && tokens[i] < vocab,
                "add_turn: token " << i << " = " << tokens[i] << " is outside the vocabulary [0, " << vocab << ")");
  }
  Layout l = current_layout(*state_, Operation::kAddTurn);
  Slot sl;
  sl.id = state_->core->next_instance_id();
  sl.is_turn = true;
  sl.turn_tokens = tokens;
  l.slots.push_back(sl);
  return detail::plan_layout(*state_, l);
}

Plan Window::plan_evict(InstanceId instance) const {
  const detail::OpHold hold(*state_->core);
  const int64_t idx = state_->index_of(instance);
  ORBIT_CHECK(idx >= 0, "evict: window " << state_->id << " holds no instance " << instance);
  Layout l = current_layout(*state_, Operation::kEvict);
  l.slots.erase(l.slots.begin() + idx);
  l.evict.push_back(idx);
  l.change_reason = name_of(state_->entries[static_cast<std::size_t>(idx)]) + " evicted";
  return detail::plan_layout(*state_, l);
}

Plan Window::plan_slide(int64_t chunks) const {
  const detail::OpHold hold(*state_->core);
  int64_t available = 0;
  for (const Entry& e : state_->entries) available += e.is_turn ? 0 : 1;
  ORBIT_CHECK(chunks >= 0 && chunks <= available,
              "slide: chunks = " << chunks << " must be in [0, " << available << "] (the window's chunk instances)");
  Layout l;
  l.op = Operation::kSlide;
  int64_t left = chunks;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < state_->entries.size(); ++i) {
    const Entry& e = state_->entries[i];
    if (!e.is_turn && left > 0) {
      l.evict.push_back(static_cast<int64_t>(i));
      names.push_back(name_of(e));
      --left;
      continue;
    }
    Slot sl;
    sl.existing = static_cast<int64_t>(i);
    sl.id = e.id;
    l.slots.push_back(sl);
  }
  std::ostringstream why;
  for (std::size_t i = 0; i < names.size(); ++i) why << (i ? ", " : "") << names[i];
  l.change_reason = why.str() + " slid out";
  return detail::plan_layout(*state_, l);
}

Plan Window::plan_recall(const ChunkRef& chunk, InstanceId before) const {
  const detail::OpHold hold(*state_->core);
  ORBIT_CHECK(chunk.valid(), "recall: invalid ChunkRef (default-constructed)");
  const auto ev = state_->evicted.find(chunk.key);
  const detail::ChunkPtr held = ev == state_->evicted.end() ? nullptr : ev->second.live();
  if (held == nullptr) {
    // An evicted chunk the engine let go of (EngineOptions::max_idle_chunks) is unregistered: record() says so.
    const detail::ChunkPtr known = state_->core->registry().record(chunk);  // throws for an unknown chunk
    for (const Entry& e : state_->entries) {
      ORBIT_CHECK(e.is_turn || e.key != known->ref.key, "recall: " << name_of(known->ref) << " is in window "
                                                                   << state_->id << " as instance " << e.id
                                                                   << " (nothing to recall)");
    }
    ORBIT_FAIL("recall: " << name_of(known->ref) << " was not evicted from window " << state_->id
                          << " (admit it instead)");
  }
  const detail::ChunkRecord& rec = *held;
  Layout l = current_layout(*state_, Operation::kRecall);
  const std::size_t at = insertion_index(*state_, before, "recall");
  if (state_->options.policy.cascade_on_recall && state_->graph.contains(ev->second.id)) {
    // Only dependents placed after the recalled chunk can see it again: one before it is left as it is
    // (re-forming it would not bring the chunk back into its context; it is no worse than before).
    std::set<InstanceId> after;
    for (std::size_t i = at; i < l.slots.size(); ++i) after.insert(l.slots[i].id);
    for (InstanceId id : state_->graph.dependents(ev->second.id)) {
      if (after.count(id) > 0) l.cascade.push_back(id);
    }
    const std::set<InstanceId> deps(l.cascade.begin(), l.cascade.end());
    for (Slot& s : l.slots) {
      if (deps.count(s.id) > 0) {
        s.force = true;
        s.reason = "recall cascade: formed with " + name_of(rec.ref) + " in its context";
      }
    }
  }
  Slot sl;
  sl.id = ev->second.id;
  sl.chunk = held;
  sl.reason = "recall: fresh patch on its current earlier context";
  l.slots.insert(l.slots.begin() + static_cast<std::ptrdiff_t>(at), sl);
  l.change_reason = name_of(rec.ref) + " recalled before it";
  return detail::plan_layout(*state_, l);
}

Plan Window::plan_reorder(const std::vector<InstanceId>& order) const {
  const detail::OpHold hold(*state_->core);
  ORBIT_CHECK(order.size() == state_->entries.size(),
              "reorder: order lists " << order.size() << " instances, the window holds " << state_->entries.size());
  std::set<InstanceId> seen;
  Layout l;
  l.op = Operation::kReorder;
  l.reorder_relookup = true;
  l.change_reason = "reordered";
  for (InstanceId id : order) {
    const int64_t idx = state_->index_of(id);
    ORBIT_CHECK(idx >= 0, "reorder: window " << state_->id << " holds no instance " << id);
    ORBIT_CHECK(seen.insert(id).second, "reorder: instance " << id << " is listed twice");
    Slot sl;
    sl.existing = idx;
    sl.id = id;
    l.slots.push_back(sl);
  }
  return detail::plan_layout(*state_, l);
}

Plan Window::plan_recondition() const {
  const detail::OpHold hold(*state_->core);
  Layout l = current_layout(*state_, Operation::kRecondition);
  for (Slot& s : l.slots) s.force = true;
  l.change_reason = "re-condition";
  return detail::plan_layout(*state_, l);
}

Plan Window::plan_flush() const {
  const detail::OpHold hold(*state_->core);
  return detail::plan_flush(*state_);
}

Plan Window::plan_heal() const {
  const detail::OpHold hold(*state_->core);
  const WindowState& s = *state_;
  // Every instance served is formed in context (exact; its patch stored for this context). A stored
  // patch is not used: one of truncated rank is approximate, and a heal would leave it to the next.
  // No budget, no orbit or stale patches, nothing deferred.
  WindowPolicy exact = s.options.policy;
  // A miss is formed (its patch stored for this context), except where the policy prefills misses (the
  // prefix-cache baselines, throughput: no background work), which is exact too. No policy reads a stored
  // patch here: throughput's would be the truncated one the heal is there to replace.
  const bool radix = exact.store_conditioned || (exact.on_miss == MissAction::kReprefill && exact.reuse_computed);
  if (!radix) exact.on_miss = MissAction::kForm;
  exact.reuse_stored = false;
  exact.survivors = SurvivorAction::kRecondition;
  exact.stale = StalePatch::kRebuild;
  exact.use_orbit_patches = false;
  exact.kl_budget = 0;
  exact.cost_aware = false;
  exact.defer_repairs = false;
  Layout l = current_layout(s, Operation::kHeal);
  l.policy = &exact;
  l.change_reason = "healed in idle time";
  for (std::size_t i = detail::heal_from(s); i < s.entries.size(); ++i) {
    l.slots[i].force = true;
    l.slots[i].reform = true;  // an approximate formation on this very context is re-formed too
    l.slots[i].reason = "healed: re-formed over an exact context";
  }
  return detail::plan_layout(s, l);
}

Plan Window::plan_place() const {
  const detail::OpHold hold(*state_->core);
  const WindowState& s = *state_;
  std::vector<std::size_t> chunk_slots;  // indices of chunk instances (turns stay where they are)
  for (std::size_t i = 0; i < s.entries.size(); ++i) {
    if (!s.entries[i].is_turn) chunk_slots.push_back(i);
  }
  const int64_t n = static_cast<int64_t>(chunk_slots.size());
  ORBIT_CHECK(n <= 63, "place: " << n << " chunk instances; placement handles at most 63");
  std::size_t prefix = 0;
  while (prefix < s.entries.size() && s.entries[prefix].is_turn) ++prefix;
  const WindowPolicy& policy = s.options.policy;
  detail::EngineCore& core = *s.core;
  planner::PlacementProblem problem;
  problem.num_items = n;
  problem.cost = [&](int64_t item, uint64_t mask) -> double {
    const Entry& e = s.entries[chunk_slots[static_cast<std::size_t>(item)]];
    const int64_t slot = __builtin_popcountll(mask);
    std::vector<std::string> ctx;
    const std::size_t slot_index = chunk_slots[static_cast<std::size_t>(slot)];
    for (std::size_t i = 0; i < slot_index; ++i) {
      if (s.entries[i].is_turn) ctx.push_back(s.entries[i].key);
    }
    // Turns first then chunks: the orbit key hashes the antecedents as a multiset, so only the leading
    // turns' order matters, and they come first either way.
    for (int64_t j = 0; j < n; ++j) {
      if (mask & (uint64_t{1} << j)) ctx.push_back(s.entries[chunk_slots[static_cast<std::size_t>(j)]].key);
    }
    if (ctx.empty()) return 0.0;
    const detail::PatchKeys keys = detail::patch_keys(detail::model_limits(core), policy, *e.chunk, ctx, prefix);
    if (policy.use_orbit_patches && core.kv().contains(keys.orbit)) return 0.0;
    return static_cast<double>(e.length);
  };
  const planner::Placement best = planner::place(problem, {});
  std::vector<InstanceId> order;
  order.reserve(s.entries.size());
  std::size_t next = 0;
  for (std::size_t i = 0; i < s.entries.size(); ++i) {
    if (s.entries[i].is_turn) {
      order.push_back(s.entries[i].id);
    } else {
      order.push_back(s.entries[chunk_slots[static_cast<std::size_t>(best.order[next++])]].id);
    }
  }
  return plan_reorder(order);
}

// ---- applying ------------------------------------------------------------------------------------

Result<ApplyReport> Window::apply(const Plan& plan) {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, (std::string("apply (") + operation_name(plan.op) + ")").c_str());
  // A heal re-forms the KV before the tentative tail: the tail is carried along, forwarded behind the
  // healed window in the heal's background time, when the window's answers come back (window_ops.h).
  const bool heal = plan.op == Operation::kHeal && state_->tail.has_value();
  const detail::KvState before = heal ? state_->state_chain() : detail::KvState{};
  Result<ApplyReport> r = detail::apply_plan(*state_, plan);
  if (heal && r.is_ok()) {
    ApplyReport report = std::move(r).value();
    // The heal is committed: the carry is optional background work, so a forward that fails here (out of
    // memory, an interrupt) drops the tail instead of reporting a committed heal as failed.
    try {
      report.forward_tokens += detail::carry_tail(*state_, before);
    } catch (...) {
      state_->tail.reset();
    }
    return report;
  }
  const bool adds = plan.op == Operation::kAdmit || plan.op == Operation::kAddTurn || plan.op == Operation::kRecall ||
                    plan.op == Operation::kSync;
  if (adds && r.is_ok()) detail::settle_tail(*state_);  // what was added shows whether answers come back
  return r;
}

ApplyReport Window::admit(const ChunkRef& chunk, InstanceId before) { return must(apply(plan_admit(chunk, before))); }
ApplyReport Window::add_turn(const std::vector<int64_t>& tokens) { return must(apply(plan_add_turn(tokens))); }
ApplyReport Window::evict(InstanceId instance) { return must(apply(plan_evict(instance))); }
ApplyReport Window::slide(int64_t chunks) {
  if (chunks == 0) {  // nothing slides out: no operation, the version stays (like flush() with nothing deferred)
    const detail::OpHold hold(*state_->core);
    ApplyReport r;
    r.op = Operation::kSlide;
    r.device_bytes = state_->device_bytes();
    return r;
  }
  return must(apply(plan_slide(chunks)));
}
ApplyReport Window::recall(const ChunkRef& chunk, InstanceId before) { return must(apply(plan_recall(chunk, before))); }
ApplyReport Window::reorder(const std::vector<InstanceId>& order) { return must(apply(plan_reorder(order))); }
ApplyReport Window::place() { return must(apply(plan_place())); }
ApplyReport Window::flush() {
  const detail::OpHold hold(*state_->core);
  if (!state_->has_deferred()) {  // nothing waits: no operation, the version stays
    ApplyReport r;
    r.op = Operation::kFlush;
    r.device_bytes = state_->device_bytes();
    return r;
  }
  return must(apply(plan_flush()));
}
ApplyReport Window::heal() {
  const detail::OpHold hold(*state_->core);
  const Plan plan = plan_heal();
  if (served_again(plan) == 0) {  // exact already: no operation, the version stays
    ApplyReport r;
    r.op = Operation::kHeal;
    r.device_bytes = state_->device_bytes();
    return r;
  }
  return must(apply(plan));
}

Window Window::fork() const {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, "fork");
  // Repairs waiting now stay waiting in both windows: with exact reuse, the first of the two to read runs
  // them and the other, still behind the same KV states, loads what it computed (and a child that edits
  // first never pays for its parent's state). Without it they would run twice: they run first, and both
  // share the repaired pages.
  if (!state_->options.policy.reuse_computed) detail::run_deferred(*state_, "fork");
  Window child(detail::fork_state(*state_));
  child.state_->lists = state_->lists;  // a branch of the same agent: the same habits
  child.state_->seen = state_->seen;
  child.state_->hints = state_->hints;                    // the hints prepared for the list the branch syncs to
  child.state_->tail = state_->tail;                      // the same KV states: its tail is the child's too
  child.state_->answers_return = state_->answers_return;  // what it learned of its agent's answers
  child.state_->answers_return_as_turns = state_->answers_return_as_turns;
  return child;
}

namespace detail {

Layout current_layout(const WindowState& s, Operation op) {
  Layout l;
  l.op = op;
  l.slots.reserve(s.entries.size() + 1);  // room for the one slot an admit or a turn inserts
  for (std::size_t i = 0; i < s.entries.size(); ++i) {
    Slot& sl = l.slots.emplace_back();
    sl.existing = static_cast<int64_t>(i);
    sl.id = s.entries[i].id;
  }
  return l;
}

std::size_t heal_from(const WindowState& s) {
  const std::vector<uint64_t> contexts = s.context_hashes();
  for (std::size_t i = 0; i < s.entries.size(); ++i) {
    const Entry& e = s.entries[i];
    if (!e.exact_when_formed || e.formed_on != contexts[i]) return i;
  }
  return s.entries.size();
}

// A copy-on-write copy of a window's state: its own id, the same pages (reference counts), plans and graph.
std::unique_ptr<WindowState> fork_state(const WindowState& s) {
  auto child = std::make_unique<WindowState>();
  child->core = s.core;
  child->id = s.core->next_window_id();
  child->options = s.options;
  child->graph = s.graph;
  child->evicted = s.evicted;
  child->eviction_clock = s.eviction_clock;
  child->conditioning_in_order = s.conditioning_in_order;
  child->reorders = s.reorders;
  for (const Entry& e : s.entries) {
    Entry c;
    static_cast<EntryMeta&>(c) = e;
    c.kv = s.core->pool().fork(*e.kv);
    child->entries.push_back(std::move(c));
  }
  // The child's rows are the parent's (same versions, positions and pages): both keep the buffers, and the first
  // to write past them copies them (WindowPast::Rows::writable).
  if (s.past != nullptr) {
    child->past = std::make_shared<WindowPast>();
    WindowPast::Rows rows = s.past->take();
    child->past->put(rows);
    s.past->put(std::move(rows));
  }
  return child;
}

Plan plan_flush(const WindowState& state) {
  Layout l = current_layout(state, Operation::kFlush);
  l.change_reason = "repair deferred by an earlier edit";
  return plan_layout(state, l);
}

void run_deferred(WindowState& state, const char* what) {
  if (!state.has_deferred()) return;
  const Plan flush = plan_flush(state);
  const Result<ApplyReport> r = apply_plan(state, flush);
  if (r.is_ok()) return;
  const std::string why =
      std::string(what) + ": the repairs earlier edits deferred could not run: " + r.status().reason();
  if (r.status().code() == StatusCode::kOutOfCapacity) {
    // As a sync's refusal for the same room: a caller that frees room on CapacityRefused (evict, slide or close
    // windows, as the message says) and tries again gets the same exception here.
    const bool own = state.options.max_bytes > 0 && flush.device_bytes_after > state.options.max_bytes;
    if (own) throw CapacityRefused(why, CapacityRefused::Bound::kWindowBytes, __FILE__, __LINE__);
    throw CapacityRefused(why, CapacityRefused::Bound::kPool, __FILE__, __LINE__, flush.pool_pages_short);
  }
  throw Error(why, __FILE__, __LINE__);
}

}  // namespace detail
}  // namespace orbit
