// PolicyRun (trace_policy_run.h): the engine and its chunks, the run over every step, and the trace's
// operations on the current branch's window.
#include "trace_policy_run.h"

#include <algorithm>

#include "orbit/common/error.h"

namespace orbit::trace_detail {

PolicyRun::PolicyRun(const Trace& trace, const Resolved& resolved, const ReplayOptions& options,
                     const WindowPolicy& policy, Transcript* transcript, bool writes_transcript)
    : trace_(trace),
      resolved_(resolved),
      options_(options),
      policy_(policy),
      transcript_(transcript),
      writes_transcript_(writes_transcript) {
  EngineOptions eo = options.engine;
  eo.store_dir.clear();
  eo.background = BackgroundMode::kDeferred;  // run after each step, timed apart from it
  engine_ = Engine::open(eo);
  if (options.calibrate) {
    fidelity_model_ = engine_->calibrate().fidelity_model;
  } else if (options.calibrate_fidelity) {
    fidelity_model_ = engine_->calibrate_fidelity().fidelity_model;
  } else {
    fidelity_model_ = engine_->fidelity_model_description();
  }
  info_ = engine_->model_info();
  yardstick_ = ReplayYardstick(options.yardstick_tokens > 0 ? options.yardstick_tokens
                                                            : engine_->stats().pool_pages * eo.page_size);
  for (std::size_t i = 0; i < trace.chunks.size(); ++i) {
    const TraceChunk& c = trace.chunks[i];
    const ResolvedChunk& rc = resolved.chunks[i];
    ChunkOptions co;
    co.label = c.name;
    co.pin = c.pin;
    if (c.embeddings) {
      EmbeddingChunk e;
      e.embeddings = view_of(rc.embeddings, {rc.rows, info_.hidden_size});
      if (!rc.grid.empty()) e.grid = view_of(rc.grid, {3, rc.rows});
      refs_[c.name] = engine_->add_embeddings(e, co);
    } else {
      refs_[c.name] = engine_->add_tokens(rc.tokens, co);
    }
  }
  WindowOptions wo;
  wo.policy = policy;
  wo.label = "main";
  branches_.emplace("main", Branch{engine_->new_window(wo), ""});
}

PolicyReplay PolicyRun::run(std::size_t policy_index, std::size_t policy_count) {
  PolicyReplay out;
  out.policy = policy_.name();
  for (std::size_t i = 0; i < trace_.steps.size(); ++i) {
    if (options_.progress) options_.progress(policy_index, policy_count, i, trace_.steps.size(), out.policy);
    StepResult r;
    try {
      r = step(i);
    } catch (const Error& e) {
      ORBIT_FAIL(file_of(trace_) << ": step " << i << " (" << trace_op_name(trace_.steps[i].op) << "), policy "
                                 << out.policy << ": " << e.what());
    }
    out.steps.push_back(std::move(r));
  }
  out.fidelity_model = engine_->fidelity_model_description();
  out.yardstick_capacity_tokens = yardstick_.capacity_tokens();
  total_policy(out);
  if (forms_patches(policy_)) {
    const int64_t capacity = options_.patch_capacity_bytes.value_or(options_.engine.host_budget_bytes);
    out.offline = offline_report(demands_, capacity);
  }
  return out;
}

InstanceId PolicyRun::instance_of(const std::string& name) {
  if (name.empty()) return 0;
  const std::string& key = refs_.at(name).key;
  for (const InstanceInfo& i : current().instances()) {
    if (!i.is_turn && i.chunk.key == key) return i.id;
  }
  const auto why = refusals_.find(name);
  ORBIT_FAIL("chunk '" << name << "' is not in the window on branch '" << current_ << "'"
                       << (why != refusals_.end() ? " (" + why->second + ")" : std::string()));
}

namespace {

// A refused step's status after "was refused: " (most statuses begin "refused: " themselves).
std::string refusal_reason(const std::string& status) {
  const std::string head = "refused: ";
  return status.rfind(head, 0) == 0 ? status.substr(head.size()) : status;
}

}  // namespace

void PolicyRun::note_refusal(const std::string& chunk, std::size_t index, const StepResult& r) {
  if (r.status == "ok") {
    refusals_.erase(chunk);
  } else {
    refusals_[chunk] = "its " + std::string(trace_op_name(trace_.steps[index].op)) + " at step " +
                       std::to_string(index) + " was refused: " + refusal_reason(r.status);
  }
}

void PolicyRun::note_divergence(std::size_t index, const StepResult& r) {
  std::string& diverged = branches_.at(current_).diverged;
  if (r.status == "ok" || !diverged.empty()) return;
  diverged = "step " + std::to_string(index) + " (" + trace_op_name(trace_.steps[index].op) +
             ") was refused: " + refusal_reason(r.status);
}

void PolicyRun::check_positions(const char* field) {
  const std::string& diverged = branches_.at(current_).diverged;
  ORBIT_CHECK(diverged.empty(), "field '" << field << "': the window on branch '" << current_
                                          << "' lacks an item the trace counts in it (" << diverged
                                          << "), so the position would name another item than the trace's");
}

InstanceId PolicyRun::evicted_instance(const TraceStep& s) {
  if (!s.chunk.empty()) return instance_of(s.chunk);
  check_positions("turn");
  InstanceId id = 0;
  int64_t seen = 0;
  for (const InstanceInfo& x : current().instances()) {
    if (x.is_turn && seen++ == s.turn) id = x.id;
  }
  ORBIT_CHECK(id != 0, "field 'turn': the window holds no live turn " << s.turn);
  return id;
}

std::vector<InstanceId> PolicyRun::reordered(const TraceStep& s) {
  std::vector<InstanceId> order;
  std::size_t next = 0;
  for (const InstanceInfo& x : current().instances()) {
    order.push_back(x.is_turn ? x.id : instance_of(s.order.at(next++)));
  }
  return order;
}

void PolicyRun::fork_branch(const TraceStep& s, std::size_t i, StepResult* r) {
  if (!policy_.reuse_computed) flush_deferred(i, r);  // what Window::fork runs (in the step's cost)
  Window child = current().fork();
  const std::string diverged = branches_.at(current_).diverged;  // the fork holds what its parent holds
  branches_.emplace(s.branch, Branch{std::move(child), current_, diverged});
  current_ = s.branch;
}

void PolicyRun::end_branch(const TraceStep& s) {
  const std::string name = s.branch.empty() ? current_ : s.branch;
  const std::string parent = branches_.at(name).parent;
  if (s.op == TraceOp::kCommit) {
    branches_.at(parent).window = std::move(branches_.at(name).window);
    branches_.at(parent).diverged = branches_.at(name).diverged;
  }
  branches_.erase(name);
  for (auto& [n, b] : branches_) {
    if (b.parent == name) b.parent = parent;
  }
  if (current_ == name) current_ = parent;
}

bool PolicyRun::generate(const TraceStep& s, std::size_t i, const std::vector<int64_t>& query, StepResult* r) {
  flush_deferred(i, r);
  GenerateOptions g;
  g.max_tokens = s.max_tokens;
  // A trace's step decodes its max_tokens whatever the model writes, the end tokens included, so that every
  // policy replayed on it answers at the same length (the figures traces give were measured so).
  g.ignore_eos = true;
  if (s.append) {
    // The answer becomes a turn behind the query: it decodes no more tokens than that turn has positions for.
    // (A decode may run one token past the window's last position, as the last token sampled needs none; once
    // appended it does, and the whole answer was refused.) Where not even the query leaves one, the append is
    // refused as before.
    const int64_t room = info_.max_positions - current().tokens() - static_cast<int64_t>(query.size());
    if (room >= 1) g.max_tokens = std::min(g.max_tokens, room);
  }
  const Generation gen = current().generate(query, g);
  r->generated = gen.tokens;
  r->query_forward_tokens = static_cast<double>(gen.prompt_forward_tokens);
  r->decode_tokens = static_cast<double>(gen.tokens.size());
  if (!s.append) return false;
  if (writes_transcript_) (*transcript_)[i] = gen.tokens;
  const std::vector<int64_t>& answer = transcript_->count(i) ? transcript_->at(i) : gen.tokens;
  int64_t same = 0;
  for (std::size_t k = 0; k < std::min(answer.size(), gen.tokens.size()); ++k) same += answer[k] == gen.tokens[k];
  r->agreement = answer.empty() ? 1.0 : static_cast<double>(same) / static_cast<double>(answer.size());
  std::vector<int64_t> turn = query;
  turn.insert(turn.end(), answer.begin(), answer.end());
  apply(current().plan_add_turn(turn), i, r);
  note_divergence(i, *r);
  return true;
}

void PolicyRun::disposable(const TraceStep& s, std::size_t i, const std::vector<int64_t>& query, StepResult* r) {
  flush_deferred(i, r);
  const DisposabilityReport d = current().disposable(instance_of(s.chunk), query, s.answer_tokens);
  r->disposable = d.disposable;
  r->generated = d.answer;
  r->kl_first = d.kl_first;
  // Both greedy decodes (with and without the conditioning) forward the whole query first.
  r->query_forward_tokens = static_cast<double>(2 * query.size());
  r->decode_tokens = static_cast<double>(d.answer.size() + d.answer_without.size());
}

bool PolicyRun::run_op(const TraceStep& s, std::size_t i, const std::vector<int64_t>& query, StepResult* r) {
  switch (s.op) {
    case TraceOp::kAdmit:
      apply(current().plan_admit(refs_.at(s.chunk), instance_of(s.before)), i, r);
      note_refusal(s.chunk, i, *r);
      note_divergence(i, *r);
      break;
    case TraceOp::kRecall:
      apply(current().plan_recall(refs_.at(s.chunk), instance_of(s.before)), i, r);
      note_refusal(s.chunk, i, *r);
      note_divergence(i, *r);
      break;
    case TraceOp::kTurn:
      apply(current().plan_add_turn(resolved_.step_tokens[i]), i, r);
      note_divergence(i, *r);
      break;
    case TraceOp::kEvict: apply(current().plan_evict(evicted_instance(s)), i, r); break;
    case TraceOp::kSlide:
      check_positions("count");
      apply(current().plan_slide(s.count), i, r);
      break;
    case TraceOp::kReorder: apply(current().plan_reorder(reordered(s)), i, r); break;
    case TraceOp::kPlace: apply(current().plan_place(), i, r); break;
    case TraceOp::kFork: fork_branch(s, i, r); break;
    case TraceOp::kSwitch: current_ = s.branch; break;
    case TraceOp::kCommit:
    case TraceOp::kDrop: end_branch(s); break;
    case TraceOp::kGenerate: return generate(s, i, query, r) || trace_op_mutates(s.op);
    case TraceOp::kDisposable: disposable(s, i, query, r); break;
  }
  return trace_op_mutates(s.op);
}

}  // namespace orbit::trace_detail
