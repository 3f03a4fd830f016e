// replay() (orbit/trace.h): one fresh Engine per policy, every step planned, applied, timed and checked
// against a re-prefill of the same window; the offline bound over the patch policies' demands.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "orbit/common/clock.h"
#include "orbit/common/error.h"
#include "orbit/planner/offline.h"
#include "orbit/store.h"
#include "orbit/trace.h"
#include "trace_internal.h"
#include "trace_yardstick.h"

namespace orbit {

namespace {

using Clock = std::chrono::steady_clock;

// ---- content, resolved once for every policy ----------------------------------------------------------

struct ResolvedChunk {
  std::vector<int64_t> tokens;    // token chunks
  std::vector<float> embeddings;  // embedding chunks: rows × hidden
  std::vector<int64_t> grid;      // [3, rows] for M-RoPE models, else empty
  int64_t rows = 0;
};

struct Resolved {
  std::vector<ResolvedChunk> chunks;  // trace.chunks order
  std::vector<int64_t> probe;
  std::vector<std::vector<int64_t>> step_tokens;  // turn contents / queries per step (empty: n/a)
};

std::string file_of(const Trace& t) { return t.source.empty() ? (t.name.empty() ? "<trace>" : t.name) : t.source; }

void check_vocab(const std::vector<int64_t>& ids, int64_t vocab, const std::string& where, const std::string& field) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ORBIT_CHECK(ids[i] >= 0 && ids[i] < vocab, where << ": field '" << field << "': item " << i << " (" << ids[i]
                                                     << ") is outside the model's vocabulary [0, " << vocab << ")");
  }
}

// A generated source's size is checked against the model before anything is allocated or sampled.
void check_count(const TokenSource& s, const ModelInfo& info, const std::string& where, const std::string& field) {
  if (s.kind == TokenSource::Kind::kTokens) return;
  const std::string name =
      field == "tokens" ? (s.kind == TokenSource::Kind::kRandom ? "random_tokens" : "sample") : field;
  ORBIT_CHECK(s.count <= info.max_positions, where << ": field '" << name << "': " << s.count
                                                   << " tokens exceed the model's " << info.max_positions
                                                   << " positions");
  if (s.kind == TokenSource::Kind::kSample) {
    const int64_t room = info.max_positions - static_cast<int64_t>(s.prompt.size());
    ORBIT_CHECK(s.count <= room, where << ": field '" << name << "': " << s.count << " sampled tokens after a "
                                       << s.prompt.size() << "-token prompt exceed the model's " << info.max_positions
                                       << " positions");
  }
}

std::vector<int64_t> resolve_source(Engine& engine, const TokenSource& s, const std::string& where,
                                    const std::string& field) {
  const ModelInfo info = engine.model_info();
  check_count(s, info, where, field);
  switch (s.kind) {
    case TokenSource::Kind::kTokens: check_vocab(s.tokens, info.vocab_size, where, field); return s.tokens;
    case TokenSource::Kind::kRandom: return trace_detail::random_tokens(s.count, s.seed, info.vocab_size);
    case TokenSource::Kind::kSample: {
      check_vocab(s.prompt, info.vocab_size, where, field == "tokens" ? "prompt" : field + ".prompt");
      Window scratch = engine.new_window();
      GenerateOptions g;
      g.max_tokens = s.count;
      g.temperature = s.temperature;
      g.seed = s.seed;
      std::vector<int64_t> out = scratch.generate(s.prompt, g).tokens;
      ORBIT_CHECK(!out.empty(), where << ": field '" << field << "': sampling produced no tokens");
      return out;
    }
    case TokenSource::Kind::kText: {
      const std::string text_field = field == "tokens" ? std::string("text") : field + ".text";
      ORBIT_CHECK(engine.has_tokenizer(), where << ": field '" << text_field << "': the trace gives text but the model "
                                                << info.origin << " has no tokenizer (give token ids, or a llama2.c "
                                                << "model with its tokenizer file beside it)");
      engine.check_text_fits(s.text, where + ": field '" + text_field + "'");
      std::vector<int64_t> out = engine.tokenize(s.text, s.bos);
      ORBIT_CHECK(!out.empty(), where << ": field '" << text_field << "': the text gives no tokens");
      return out;
    }
  }
  return {};
}

Resolved resolve(const Trace& trace, Engine& engine) {
  const std::string file = file_of(trace);
  const ModelInfo info = engine.model_info();
  Resolved r;
  std::map<std::string, std::string> seen;  // content → chunk name (chunks must differ in content)
  for (std::size_t i = 0; i < trace.chunks.size(); ++i) {
    const TraceChunk& c = trace.chunks[i];
    const std::string where = file + ": chunk " + std::to_string(i) + " ('" + c.name + "')";
    ResolvedChunk rc;
    std::string content;
    if (c.embeddings) {
      // rows = t·h·w, checked one factor at a time so a large grid cannot overflow or allocate first.
      int64_t rows = 1;
      for (int64_t d : c.media.grid) {
        ORBIT_CHECK(d >= 1 && d <= info.max_positions / rows,
                    where << ": field 'embeddings.grid': [" << c.media.grid[0] << ", " << c.media.grid[1] << ", "
                          << c.media.grid[2] << "] holds more rows than the model's " << info.max_positions
                          << " positions");
        rows *= d;
      }
      rc.rows = c.media.rows();
      rc.embeddings = trace_detail::random_embeddings(c.media, info.hidden_size);
      if (info.position_rows == 3) {
        rc.grid.resize(static_cast<std::size_t>(3 * rc.rows));
        int64_t k = 0;
        for (int64_t t = 0; t < c.media.grid[0]; ++t) {
          for (int64_t h = 0; h < c.media.grid[1]; ++h) {
            for (int64_t x = 0; x < c.media.grid[2]; ++x, ++k) {
              rc.grid[static_cast<std::size_t>(k)] = t;
              rc.grid[static_cast<std::size_t>(rc.rows + k)] = h;
              rc.grid[static_cast<std::size_t>(2 * rc.rows + k)] = x;
            }
          }
        }
      }
      content = "e:" + std::to_string(c.media.seed) + ":" + std::to_string(c.media.std) + ":" + std::to_string(rc.rows);
    } else {
      rc.tokens = resolve_source(engine, c.tokens, where, "tokens");
      rc.rows = static_cast<int64_t>(rc.tokens.size());
      for (int64_t t : rc.tokens) content += std::to_string(t) + ",";
    }
    ORBIT_CHECK(rc.rows <= info.max_positions, where << ": field 'tokens': " << rc.rows << " tokens exceed the model's "
                                                     << info.max_positions << " positions");
    const auto [it, fresh] = seen.emplace(content, c.name);
    ORBIT_CHECK(fresh, where << ": field 'tokens': same content as chunk '" << it->second
                             << "' (chunks are identified by content; give it another seed or tokens)");
    r.chunks.push_back(std::move(rc));
  }
  r.probe = resolve_source(engine, trace.probe, file + ": top level", "probe");
  r.step_tokens.resize(trace.steps.size());
  for (std::size_t i = 0; i < trace.steps.size(); ++i) {
    const TraceStep& s = trace.steps[i];
    const std::string where = file + ": step " + std::to_string(i) + " (" + trace_op_name(s.op) + ")";
    if (s.op == TraceOp::kTurn) r.step_tokens[i] = resolve_source(engine, s.tokens, where, "tokens");
    if ((s.op == TraceOp::kGenerate || s.op == TraceOp::kDisposable) && !s.tokens.empty()) {
      r.step_tokens[i] = resolve_source(engine, s.tokens, where, "query");
    }
  }
  return r;
}

// ---- patch demands for the offline bound ----------------------------------------------------------------

bool forms_patches(const WindowPolicy& p) {
  return p.on_miss == MissAction::kForm && p.reuse_stored && !p.store_conditioned;
}

struct DemandLog {
  std::vector<planner::Demand> demands;
  int64_t formations = 0;
  double form_tokens = 0;
};

// Estimated bytes of a rank-(m_k, m_v) patch of an n-token chunk: per layer U (n×m) and Vᵀ (m×D) for keys
// and values, float32, with D = kv_bytes_per_token / (8 · layers) (keys and values of equal width).
int64_t patch_bytes(const ModelInfo& info, const WindowPolicy& p, int64_t n) {
  const int64_t layers = std::max<int64_t>(info.num_layers, 1);
  const int64_t d = std::max<int64_t>(info.kv_bytes_per_token / (8 * layers), 1);
  auto rank = [&](int64_t r) { return std::min(r < 0 ? d : r, std::min(n, d)); };
  return 4 * layers * (rank(p.rank_k) + rank(p.rank_v)) * (n + d);
}

void log_demands(const Plan& plan, const WindowPolicy& p, const ModelInfo& info, std::size_t step, DemandLog* log) {
  std::vector<std::string> context;
  std::size_t prefix = 0;
  bool leading = true;
  for (const PlanStep& s : plan.steps) {
    if (s.action == StepAction::kEvict) continue;
    if (s.action == StepAction::kForm || s.action == StepAction::kApplyPatch) {
      const std::vector<std::string> pre(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(prefix));
      const std::vector<std::string> ante(context.begin() + static_cast<std::ptrdiff_t>(prefix), context.end());
      const std::string sig = p.use_orbit_patches ? orbit_signature(pre, ante) : exact_signature(context);
      planner::Demand d;
      d.step = static_cast<int64_t>(step);
      d.key = s.chunk.key + "/" + sig;
      d.bytes = patch_bytes(info, p, s.chunk.length);
      d.form_cost = static_cast<double>(s.chunk.length);
      log->demands.push_back(d);
      if (s.action == StepAction::kForm) {
        ++log->formations;
        log->form_tokens += static_cast<double>(s.chunk.length);
      }
    }
    if (leading && s.is_turn)
      ++prefix;
    else
      leading = false;
    context.push_back(s.chunk.key);
  }
}

OfflineReport offline_report(const DemandLog& log, int64_t capacity) {
  OfflineReport o;
  o.capacity_bytes = capacity;
  o.demands = static_cast<int64_t>(log.demands.size());
  std::set<std::string> keys;
  for (const auto& d : log.demands) keys.insert(d.key);
  o.distinct_patches = static_cast<int64_t>(keys.size());
  o.online_formations = log.formations;
  o.online_form_tokens = log.form_tokens;
  const planner::OfflineBound b = planner::optimise_offline(log.demands, capacity);
  o.compulsory_formations = b.compulsory_misses;
  o.compulsory_form_tokens = b.compulsory_cost;
  o.belady_formations = b.belady_misses;
  o.belady_form_tokens = b.belady_cost;
  const planner::PolicyCost lru = planner::simulate_lru(log.demands, capacity);
  o.lru_formations = lru.misses;
  o.lru_form_tokens = lru.cost;
  return o;
}

// ---- one policy ------------------------------------------------------------------------------------------

struct Branch {
  Window window;
  std::string parent;
};

// Tokens appended at `generate … append` steps, fixed by the first policy replayed.
using Transcript = std::map<std::size_t, std::vector<int64_t>>;

class PolicyRun {
 public:
  PolicyRun(const Trace& trace, const Resolved& resolved, const ReplayOptions& options, const WindowPolicy& policy,
            Transcript* transcript, bool writes_transcript)
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
    } else {
      fidelity_model_ = engine_->fidelity_model_description();
    }
    info_ = engine_->model_info();
    yardstick_ = trace_detail::ReplayYardstick(
        options.yardstick_tokens > 0 ? options.yardstick_tokens : engine_->stats().pool_pages * eo.page_size);
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

  PolicyReplay run(std::size_t policy_index, std::size_t policy_count) {
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
    total(out);
    if (forms_patches(policy_)) {
      const int64_t capacity =
          options_.patch_capacity_bytes > 0 ? options_.patch_capacity_bytes : options_.engine.host_budget_bytes;
      out.offline = offline_report(demands_, capacity);
    }
    return out;
  }

  // out.totals from out.steps.
  static void total(PolicyReplay& out) {
    out.totals = PolicyTotals{};
    PolicyTotals& t = out.totals;
    int64_t predicted_steps = 0;
    double log_sum = 0, abs_log_sum = 0;
    for (const StepResult& s : out.steps) {
      t.forward_tokens += s.forward_tokens;
      t.critical_forward_tokens += s.critical_forward_tokens;
      t.query_forward_tokens += s.query_forward_tokens;
      t.prefix_cache_tokens += s.prefix_cache_tokens;
      trace_detail::add_yardstick_totals(s, &t);
      t.background_forward_tokens += s.background_forward_tokens;
      t.heal_forward_tokens += s.heal_forward_tokens;
      t.prepare_forward_tokens += s.prepare_forward_tokens;
      t.check_forward_tokens += s.check_forward_tokens;
      t.fidelity_checks += s.check_kl >= 0 ? 1 : 0;
      t.fidelity_correction = s.fidelity_correction;
      t.critical_seconds += s.critical_seconds;
      t.background_seconds += s.background_seconds;
      if (s.fidelity && s.predicted_kl >= 0) {
        t.mean_predicted_kl += s.predicted_kl;
        ++predicted_steps;
      }
      t.full_prefill_tokens += s.full_prefill_tokens;
      t.decode_tokens += s.decode_tokens;
      t.seconds += s.seconds;
      t.bytes_moved += s.bytes_moved;
      t.peak_device_bytes = std::max(t.peak_device_bytes, s.peak_device_bytes);
      t.patches_formed += s.patches_formed;
      t.patch_hits += s.patch_hits;
      t.refused += s.status == "ok" ? 0 : 1;
      if (s.fidelity && s.predicted_kl > kKlFloor && s.fidelity->kl > kKlFloor) {
        const double l = std::log(s.predicted_kl / s.fidelity->kl);
        log_sum += l;
        abs_log_sum += std::abs(l);
        ++t.predicted_steps;
      }
      if (s.fidelity) {
        ++t.fidelity_steps;
        t.mean_kl += s.fidelity->kl;
        t.max_kl = std::max(t.max_kl, s.fidelity->kl);
        t.mean_top1 += s.fidelity->top1;
        t.top1_rows += s.fidelity->rows;
        t.top1_misses += s.fidelity->top1_misses;
        t.near_tie_rows += s.fidelity->near_tie_rows;
        t.near_tie_misses += s.fidelity->near_tie_misses;
      }
    }
    if (predicted_steps > 0) t.mean_predicted_kl /= static_cast<double>(predicted_steps);
    if (t.predicted_steps > 0) {
      t.kl_prediction_bias = std::exp(log_sum / static_cast<double>(t.predicted_steps));
      t.kl_prediction_spread = std::exp(abs_log_sum / static_cast<double>(t.predicted_steps));
    }
    if (t.fidelity_steps > 0) {
      t.mean_kl /= static_cast<double>(t.fidelity_steps);
      t.mean_top1 /= static_cast<double>(t.fidelity_steps);
    }
    t.loss_agreement = trace_detail::loss_agreement(out.steps);
  }

  // Keeps, per step of `into`, the faster of its times and `again`'s (a later round of the same policy).
  static void keep_fastest(PolicyReplay& into, const PolicyReplay& again, int round) {
    ORBIT_CHECK(again.steps.size() == into.steps.size(),
                "replay: round " << round << " of policy " << into.policy << " ran " << again.steps.size()
                                 << " steps, the first ran " << into.steps.size());
    for (std::size_t i = 0; i < into.steps.size(); ++i) {
      StepResult& s = into.steps[i];
      const StepResult& r = again.steps[i];
      ORBIT_CHECK(r.critical_forward_tokens == s.critical_forward_tokens &&
                      r.background_forward_tokens == s.background_forward_tokens,
                  "replay: round " << round << " of policy " << into.policy << " computed " << r.critical_forward_tokens
                                   << " + " << r.background_forward_tokens << " forward tokens at step " << i
                                   << ", the first round " << s.critical_forward_tokens << " + "
                                   << s.background_forward_tokens << " (the replay is not deterministic)");
      s.critical_seconds = std::min(s.critical_seconds, r.critical_seconds);
      s.background_seconds = std::min(s.background_seconds, r.background_seconds);
      s.seconds = s.critical_seconds + s.background_seconds;
    }
    total(into);
  }

 private:
  Window& current() { return branches_.at(current_).window; }

  InstanceId instance_of(const std::string& name) {
    if (name.empty()) return 0;
    const std::string& key = refs_.at(name).key;
    for (const InstanceInfo& i : current().instances()) {
      if (!i.is_turn && i.chunk.key == key) return i.id;
    }
    const auto why = refusals_.find(name);
    ORBIT_FAIL("chunk '" << name << "' is not in the window on branch '" << current_ << "'"
                         << (why != refusals_.end() ? " (" + why->second + ")" : std::string()));
  }

  // Remembers why a chunk did not enter the window, so a later step naming it says so.
  void note_refusal(const std::string& chunk, std::size_t index, const StepResult& r) {
    if (r.status == "ok") {
      refusals_.erase(chunk);
    } else {
      refusals_[chunk] = "its " + std::string(trace_op_name(trace_.steps[index].op)) + " at step " +
                         std::to_string(index) + " was refused: " + r.status;
    }
  }

  // Applies a plan: records cost and demands into r. False when the window refused it.
  void apply(const Plan& plan, std::size_t index, StepResult* r) {
    if (options_.explain) r->plan += plan.describe();
    const Result<ApplyReport> applied = current().apply(plan);
    if (!applied.is_ok()) {
      r->status = applied.status().to_string();
      return;
    }
    const ApplyReport& a = applied.value();
    r->predicted_kl = plan.predicted_kl;
    r->patches_formed += a.patches_formed;
    r->patch_hits += a.patch_hits;
    r->canonicals_encoded += a.canonicals_encoded;
    r->bytes_moved += a.bytes_moved;
    if (forms_patches(policy_)) log_demands(plan, policy_, info_, index, &demands_);
  }

  // Runs the repairs earlier edits deferred as a plan of their own, before an operation that reads the window
  // (fork, generate, disposable): the window would run the same plan itself, but this way --explain shows it and
  // the step records its predicted KL.
  void flush_deferred(std::size_t index, StepResult* r) {
    for (const InstanceInfo& x : current().instances()) {
      if (x.deferred) {
        apply(current().plan_flush(), index, r);
        return;
      }
    }
  }

  // The agent's idle time after a model call (the tool it asked for runs): Window::idle (heal, prepared
  // recalls), counted as the step's background. After the step's probe, which measures what the model read.
  void use_idle_time(StepResult* r) {
    const EngineStats before = engine_->stats();
    const auto t0 = Clock::now();
    const IdleReport idle = current().idle();
    engine_->run_background();
    const EngineStats after = engine_->stats();
    r->heal_forward_tokens = idle.heal_forward_tokens;
    r->prepare_forward_tokens = idle.prepare_forward_tokens;
    r->check_forward_tokens = idle.check_forward_tokens;
    r->check_kl = idle.measured_kl;
    r->background_forward_tokens += after.background_forward_tokens - before.background_forward_tokens;
    r->forward_tokens += after.forward_tokens - before.forward_tokens;
    r->background_seconds += seconds_since(t0);
    r->seconds = r->critical_seconds + r->background_seconds;
    r->patches_formed += after.patches_formed - before.patches_formed;
  }

  InstanceId evicted_instance(const TraceStep& s) {
    if (!s.chunk.empty()) return instance_of(s.chunk);
    InstanceId id = 0;
    int64_t seen = 0;
    for (const InstanceInfo& x : current().instances()) {
      if (x.is_turn && seen++ == s.turn) id = x.id;
    }
    ORBIT_CHECK(id != 0, "field 'turn': the window holds no live turn " << s.turn);
    return id;
  }

  std::vector<InstanceId> reordered(const TraceStep& s) {
    std::vector<InstanceId> order;
    std::size_t next = 0;
    for (const InstanceInfo& x : current().instances()) {
      order.push_back(x.is_turn ? x.id : instance_of(s.order.at(next++)));
    }
    return order;
  }

  void fork_branch(const TraceStep& s, std::size_t i, StepResult* r) {
    if (!policy_.reuse_computed) flush_deferred(i, r);  // what Window::fork runs (in the step's cost)
    Window child = current().fork();
    branches_.emplace(s.branch, Branch{std::move(child), current_});
    current_ = s.branch;
  }

  void end_branch(const TraceStep& s) {
    const std::string name = s.branch.empty() ? current_ : s.branch;
    const std::string parent = branches_.at(name).parent;
    if (s.op == TraceOp::kCommit) branches_.at(parent).window = std::move(branches_.at(name).window);
    branches_.erase(name);
    for (auto& [n, b] : branches_) {
      if (b.parent == name) b.parent = parent;
    }
    if (current_ == name) current_ = parent;
  }

  // Decodes; with `append`, adds the query and the answer (the transcript's, when another policy wrote it)
  // as a turn. Returns whether the window changed.
  bool generate(const TraceStep& s, std::size_t i, const std::vector<int64_t>& query, StepResult* r) {
    flush_deferred(i, r);
    GenerateOptions g;
    g.max_tokens = s.max_tokens;
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
    return true;
  }

  void disposable(const TraceStep& s, std::size_t i, const std::vector<int64_t>& query, StepResult* r) {
    flush_deferred(i, r);
    const DisposabilityReport d = current().disposable(instance_of(s.chunk), query, s.answer_tokens);
    r->disposable = d.disposable;
    r->generated = d.answer;
    r->kl_first = d.kl_first;
    // Both greedy decodes (with and without the conditioning) forward the whole query first.
    r->query_forward_tokens = static_cast<double>(2 * query.size());
    r->decode_tokens = static_cast<double>(d.answer.size() + d.answer_without.size());
  }

  // The step's operation on the current window; returns whether it changed the window.
  bool run_op(const TraceStep& s, std::size_t i, const std::vector<int64_t>& query, StepResult* r) {
    switch (s.op) {
      case TraceOp::kAdmit:
        apply(current().plan_admit(refs_.at(s.chunk), instance_of(s.before)), i, r);
        note_refusal(s.chunk, i, *r);
        break;
      case TraceOp::kRecall:
        apply(current().plan_recall(refs_.at(s.chunk), instance_of(s.before)), i, r);
        note_refusal(s.chunk, i, *r);
        break;
      case TraceOp::kTurn: apply(current().plan_add_turn(resolved_.step_tokens[i]), i, r); break;
      case TraceOp::kEvict: apply(current().plan_evict(evicted_instance(s)), i, r); break;
      case TraceOp::kSlide: apply(current().plan_slide(s.count), i, r); break;
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

  // The step's counters (critical: before the background runs) and the window after it.
  void account(const EngineStats& before, Clock::time_point t0, StepResult* r) {
    r->critical_seconds = seconds_since(t0);
    const EngineStats mid = engine_->stats();
    const auto t1 = Clock::now();
    engine_->run_background();
    r->background_seconds = seconds_since(t1);
    const EngineStats after = engine_->stats();
    r->seconds = r->critical_seconds + r->background_seconds;
    // The engine counts what plans forward; a read's query forwards are the window's, counted here.
    r->critical_forward_tokens = mid.critical_forward_tokens - before.critical_forward_tokens + r->query_forward_tokens;
    r->prefix_cache_tokens = mid.prefix_cache_tokens - before.prefix_cache_tokens;
    r->background_forward_tokens = after.background_forward_tokens - mid.background_forward_tokens;
    r->forward_tokens = after.forward_tokens - before.forward_tokens + r->query_forward_tokens;
    r->patches_formed = after.patches_formed - before.patches_formed;
    Window& w = current();
    r->branch = current_;
    r->window_tokens = w.tokens();
    r->window_bytes = w.stats().device_bytes;
    r->device_bytes = engine_->stats().pool_bytes_used;
    peak_ = std::max(peak_, r->device_bytes);
    r->peak_device_bytes = peak_;
  }

  StepResult step(std::size_t i) {
    const TraceStep& s = trace_.steps[i];
    StepResult r;
    r.index = i;
    r.op = s.op;
    const std::vector<int64_t>& query = resolved_.step_tokens[i].empty() ? resolved_.probe : resolved_.step_tokens[i];
    const EngineStats before = engine_->stats();
    yardstick_.before(s, current());
    const auto t0 = Clock::now();
    const bool mutated = run_op(s, i, query, &r);
    account(before, t0, &r);
    Window& w = current();
    if (mutated && r.status == "ok") r.full_prefill_tokens = static_cast<double>(r.window_tokens);
    // A model call's query: forwarded whole without a cache (the window was re-prefilled at the step that
    // changed it).
    if (r.status == "ok" && (s.op == TraceOp::kGenerate || s.op == TraceOp::kDisposable)) {
      r.full_prefill_tokens += static_cast<double>(query.size());
    }
    for (const InstanceInfo& x : w.instances()) r.deferred += x.deferred ? 1 : 0;
    const auto kept = s.append ? transcript_->find(i) : transcript_->end();
    yardstick_.after(s, w, query, kept != transcript_->end() ? kept->second : r.generated, &r);
    const bool fits = r.window_tokens + static_cast<int64_t>(resolved_.probe.size()) <= info_.max_positions;
    if (options_.fidelity && r.window_tokens > 0 && fits && r.deferred == 0) {
      r.fidelity = step_fidelity(w.reference_logits(resolved_.probe, true), w.logits(resolved_.probe, true));
      if (options_.attribute) r.losses = w.loss_by_instance(resolved_.probe);
    }
    if (s.op == TraceOp::kGenerate && r.status == "ok" &&
        (policy_.heal_when_idle || policy_.prepare_recalls > 0 || policy_.prepare_moves > 0)) {
      use_idle_time(&r);
    }
    r.fidelity_correction = engine_->stats().fidelity_correction;
    return r;
  }

  const Trace& trace_;
  const Resolved& resolved_;
  const ReplayOptions& options_;
  WindowPolicy policy_;
  Transcript* transcript_;
  bool writes_transcript_;
  std::shared_ptr<Engine> engine_;
  ModelInfo info_;
  std::map<std::string, ChunkRef> refs_;
  std::map<std::string, Branch> branches_;
  std::map<std::string, std::string> refusals_;  // chunk name -> why its last admit/recall was refused
  std::string current_ = "main";
  int64_t peak_ = 0;
  DemandLog demands_;
  std::string fidelity_model_;
  trace_detail::ReplayYardstick yardstick_;
};

}  // namespace

const PolicyReplay* ReplayReport::find(const std::string& policy_name) const {
  for (const PolicyReplay& p : policies) {
    if (p.policy == policy_name) return &p;
  }
  return nullptr;
}

ReplayReport replay(const Trace& trace, const ReplayOptions& options) {
  validate_trace(trace);
  ORBIT_CHECK(!options.engine.model.empty(), "replay: no model (ReplayOptions::engine.model)");
  // Policies: the ones asked for (duplicates dropped), then the baselines not already among them.
  std::vector<std::pair<WindowPolicy, bool>> policies;
  std::set<std::string> names;
  auto add = [&](const WindowPolicy& p, bool baseline) {
    if (names.insert(p.name()).second) policies.emplace_back(p, baseline);
  };
  for (const std::string& spec : options.policies) add(parse_policy(spec), false);
  if (options.baselines) {
    for (const char* spec : {"reprefill", "prefix", "blind"}) add(parse_policy(spec), true);
  }
  ORBIT_CHECK(!policies.empty(), "replay: no policies to replay");
  ORBIT_CHECK(options.timing_repeats >= 1,
              "replay: ReplayOptions::timing_repeats must be >= 1, got " << options.timing_repeats);
  ORBIT_CHECK(options.timing_repeats == 1 || !options.calibrate,
              "replay: ReplayOptions::timing_repeats > 1 needs calibrate off (calibration fits the cost model from "
              "measured times, so each round could plan differently)");
  // The transcript of generate+append steps comes from the reprefill run (the exact window) when there is
  // one: run it first, report in the order above.
  std::vector<std::size_t> run_order;
  const std::string ceiling = parse_policy("reprefill").name();
  for (std::size_t i = 0; i < policies.size(); ++i) {
    if (policies[i].first.name() == ceiling) run_order.push_back(i);
  }
  for (std::size_t i = 0; i < policies.size(); ++i) {
    if (policies[i].first.name() != ceiling) run_order.push_back(i);
  }

  EngineOptions eo = options.engine;
  eo.store_dir.clear();
  std::shared_ptr<Engine> first = Engine::open(eo);
  const Resolved resolved = resolve(trace, *first);
  ReplayReport report;
  report.trace = trace.name.empty() ? file_of(trace) : trace.name;
  report.source = trace.source;
  report.model = first->model_info().origin;
  report.device = first->model_info().device;
  report.dtype = first->model_info().dtype;
  report.fingerprint = first->model_info().fingerprint;
  report.steps = trace.steps.size();
  first.reset();

  Transcript transcript;
  std::vector<PolicyReplay> results(policies.size());
  for (std::size_t k = 0; k < run_order.size(); ++k) {
    const std::size_t i = run_order[k];
    PolicyRun run(trace, resolved, options, policies[i].first, &transcript, k == 0);
    results[i] = run.run(k, run_order.size());
    results[i].baseline = policies[i].second;
  }
  // Later rounds only time the steps: no fidelity forwards, no plan text.
  ReplayOptions timing = options;
  timing.fidelity = false;
  timing.explain = false;
  for (int round = 2; round <= options.timing_repeats; ++round) {
    for (std::size_t k = 0; k < run_order.size(); ++k) {
      const std::size_t i = run_order[k];
      PolicyRun run(trace, resolved, timing, policies[i].first, &transcript, false);
      PolicyRun::keep_fastest(results[i], run.run(k, run_order.size()), round);
    }
  }
  report.policies = std::move(results);
  return report;
}

}  // namespace orbit
