// Trace validation by simulating the window (orbit/trace.h), and the deterministic generators.
#include <algorithm>
#include <cmath>
#include <set>

#include "orbit/common/error.h"
#include "orbit/trace.h"
#include "trace_internal.h"

namespace orbit::trace_detail {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t Rng::below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(std::max<int64_t>(n, 1))); }

double Rng::uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

double Rng::normal() {
  const double u1 = std::max(uniform(), 1e-300);
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<int64_t> random_tokens(int64_t count, uint64_t seed, int64_t vocab) {
  ORBIT_CHECK(vocab > 3, "random tokens need a vocabulary of more than 3 ids, got " << vocab);
  Rng rng(seed);
  std::vector<int64_t> out(static_cast<std::size_t>(count));
  for (auto& t : out) t = 3 + rng.below(vocab - 3);
  return out;
}

std::vector<float> random_embeddings(const EmbeddingSource& source, int64_t hidden) {
  Rng rng(source.seed);
  std::vector<float> out(static_cast<std::size_t>(source.rows() * hidden));
  for (auto& x : out) x = static_cast<float>(source.std * rng.normal());
  return out;
}

int64_t source_tokens(const TokenSource& source) {
  switch (source.kind) {
    case TokenSource::Kind::kTokens: return static_cast<int64_t>(source.tokens.size());
    // At most one token per byte, plus the dummy-prefix space and BOS (the tokenizer is the model's).
    case TokenSource::Kind::kText:
      return source.text.empty() ? (source.bos ? 1 : 0)
                                 : static_cast<int64_t>(source.text.size()) + 1 + (source.bos ? 1 : 0);
    default: return source.count;
  }
}

int64_t chunk_tokens(const TraceChunk& chunk) {
  return chunk.embeddings ? chunk.media.rows() : source_tokens(chunk.tokens);
}

namespace {

// Where a step is, for its errors ("file: step N (op): field 'f': message"), and the checks steps share.
struct StepWhere {
  const Trace& trace;
  const TraceSim& sim;
  std::size_t index;
  TraceOp op;
  std::string on;  // " on branch 'name'": the branch the step applies to

  [[noreturn]] void fail(const std::string& field, const std::string& message) const {
    ORBIT_FAIL((trace.source.empty() ? std::string("<trace>") : trace.source)
               << ": step " << index << " (" << trace_op_name(op) << "): field '" << field << "': " << message);
  }
  // The trace's chunk `name`; fails naming `field` when the trace has none.
  const TraceChunk& known_chunk(const std::string& field, const std::string& name) const {
    const TraceChunk* c = sim.chunk(name);
    if (c == nullptr) fail(field, "'" + name + "' is not a chunk of this trace (see \"chunks\")");
    return *c;
  }
};

using Branches = std::map<std::string, SimBranch>;

std::size_t find_chunk(const SimBranch& b, const std::string& name) {
  for (std::size_t i = 0; i < b.items.size(); ++i) {
    if (!b.items[i].turn && b.items[i].chunk == name) return i;
  }
  return b.items.size();
}

// admit / recall: where the step's chunk goes in `b`, once it is known to be a chunk of the trace that is
// not in the window (and, for recall, was evicted from it).
std::size_t check_insert(const StepWhere& w, const SimBranch& b, const TraceStep& s) {
  w.known_chunk("chunk", s.chunk);
  if (find_chunk(b, s.chunk) != b.items.size()) w.fail("chunk", "'" + s.chunk + "' is already in the window" + w.on);
  if (s.op == TraceOp::kRecall && b.evicted.count(s.chunk) == 0) {
    w.fail("chunk", "'" + s.chunk + "' was not evicted" + w.on + " (admit it instead)");
  }
  if (s.before.empty()) return b.items.size();
  w.known_chunk("before", s.before);
  const std::size_t at = find_chunk(b, s.before);
  if (at == b.items.size()) w.fail("before", "'" + s.before + "' is not in the window" + w.on);
  return at;
}

// evict: a chunk by name (remembered as evicted) or a live turn by its index among the turns.
void sim_evict(const StepWhere& w, SimBranch& b, const TraceStep& s) {
  std::size_t at = b.items.size();
  if (!s.chunk.empty()) {
    w.known_chunk("chunk", s.chunk);
    at = find_chunk(b, s.chunk);
    if (at == b.items.size()) w.fail("chunk", "'" + s.chunk + "' is not in the window" + w.on);
    b.evicted.insert(s.chunk);
  } else {
    int64_t seen = 0;
    for (std::size_t i = 0; i < b.items.size() && at == b.items.size(); ++i) {
      if (b.items[i].turn && seen++ == s.turn) at = i;
    }
    if (at == b.items.size()) {
      w.fail("turn", "index " + std::to_string(s.turn) + " but the window holds " + std::to_string(seen) +
                         " live turns" + w.on);
    }
  }
  b.items.erase(b.items.begin() + static_cast<std::ptrdiff_t>(at));
}

// slide: the first s.count chunks in window order leave (turns stay); refused while the order is unknown.
void sim_slide(const StepWhere& w, SimBranch& b, const TraceStep& s) {
  if (b.placed_at >= 0) {
    w.fail("count", "the chunk order after 'place' (step " + std::to_string(b.placed_at) +
                        ") depends on the policy; reorder or evict by name before sliding");
  }
  int64_t chunks = 0;
  for (const SimItem& i : b.items) chunks += i.turn ? 0 : 1;
  if (s.count < 1 || s.count > chunks) {
    w.fail("count", std::to_string(s.count) + " but the window holds " + std::to_string(chunks) + " chunks" + w.on);
  }
  int64_t left = s.count;
  for (std::size_t i = 0; i < b.items.size() && left > 0;) {
    if (!b.items[i].turn) {
      b.evicted.insert(b.items[i].chunk);
      b.items.erase(b.items.begin() + static_cast<std::ptrdiff_t>(i));
      --left;
    } else {
      ++i;
    }
  }
}

// reorder: s.order must list every chunk in the window, once each.
void check_reorder(const StepWhere& w, const SimBranch& b, const TraceStep& s) {
  std::vector<std::string> have;
  for (const SimItem& i : b.items) {
    if (!i.turn) have.push_back(i.chunk);
  }
  std::set<std::string> seen;
  for (const std::string& name : s.order) {
    w.known_chunk("order", name);
    if (find_chunk(b, name) == b.items.size()) w.fail("order", "'" + name + "' is not in the window" + w.on);
    if (!seen.insert(name).second) w.fail("order", "'" + name + "' is listed twice");
  }
  if (s.order.size() != have.size()) {
    std::string missing;
    for (const std::string& h : have) {
      if (!seen.count(h)) missing += (missing.empty() ? "" : ", ") + h;
    }
    w.fail("order", "lists " + std::to_string(s.order.size()) + " chunks but the window holds " +
                        std::to_string(have.size()) + w.on + " (missing: " + missing + ")");
  }
}

// The most window items the live branches may hold in all: a fork copies its parent's, so a small file that
// forks a long window many times would otherwise need memory far past its size (5,000 admits and 6,000 forks,
// a 540 KB trace, held 1.5 GB). Far above what an agent's branches hold.
constexpr std::size_t kMaxLiveItems = 1'000'000;

// fork: a new live branch, a copy of the current one, becomes current.
void sim_fork(const StepWhere& w, Branches& branches, std::string& current, const std::string& name) {
  if (branches.count(name)) w.fail("branch", "'" + name + "' is already a live branch");
  std::size_t live = branches.at(current).items.size();
  for (const auto& [n, b] : branches) live += b.items.size();
  if (live > kMaxLiveItems) {
    w.fail("branch", "'" + name + "' would make the live branches hold " + std::to_string(live) +
                         " window items in all, past the " + std::to_string(kMaxLiveItems) +
                         " a trace may (commit or drop branches before forking again)");
  }
  SimBranch child = branches.at(current);
  child.parent = current;
  branches[name] = std::move(child);
  current = name;
}

// commit / drop: the branch (the current one when unnamed) ends; commit first puts it in its parent's
// place. Its children become its parent's, and the parent becomes current if it was.
void sim_end_branch(const StepWhere& w, Branches& branches, std::string& current, const TraceStep& s) {
  const std::string name = s.branch.empty() ? current : s.branch;
  if (!branches.count(name)) w.fail("branch", "'" + name + "' is not a live branch");
  if (name == "main")
    w.fail("branch", std::string("'main' cannot be ") + (s.op == TraceOp::kCommit ? "committed" : "dropped") +
                         " (it has no parent)");
  const std::string parent = branches.at(name).parent;
  if (s.op == TraceOp::kCommit) {
    SimBranch moved = std::move(branches.at(name));
    moved.parent = branches.at(parent).parent;
    branches[parent] = std::move(moved);
  }
  branches.erase(name);
  for (auto& [n, br] : branches) {
    if (br.parent == name) br.parent = parent;
  }
  if (current == name) current = parent;
}

}  // namespace

TraceSim::TraceSim(const Trace& trace) : trace_(trace) { branches_["main"]; }

int64_t TraceSim::tokens() const {
  int64_t n = 0;
  for (const SimItem& i : current().items) n += i.tokens;
  return n;
}

int64_t TraceSim::turns() const {
  int64_t n = 0;
  for (const SimItem& i : current().items) n += i.turn ? 1 : 0;
  return n;
}

EvictedNames::Tree& EvictedNames::own() {
  if (!names_) {
    names_ = std::make_shared<Tree>();
  } else if (names_.use_count() > 1) {
    names_ = std::make_shared<Tree>(*names_);
  }
  return *names_;
}

const EvictedNames::Tree& EvictedNames::empty() {
  static const Tree none;
  return none;
}

std::size_t EvictedNames::count_prefixed(const std::string& prefix) const {
  const Tree& t = names();
  // Past every name with the prefix: the prefix with its last byte below 0xFF raised by one (trailing 0xFF
  // bytes dropped); none such, and every name from the prefix on has it.
  std::string past = prefix;
  while (!past.empty() && static_cast<unsigned char>(past.back()) == 0xFF) past.pop_back();
  std::size_t end = t.size();
  if (!past.empty()) {
    past.back() = static_cast<char>(static_cast<unsigned char>(past.back()) + 1);
    end = t.order_of_key(past);
  }
  return end - t.order_of_key(prefix);
}

const std::string& EvictedNames::prefixed(const std::string& prefix, std::size_t k) const {
  return *names().find_by_order(names().order_of_key(prefix) + k);
}

const TraceChunk* TraceSim::chunk(const std::string& name) const {
  const auto at = chunk_at_.find(name);
  if (at != chunk_at_.end() && at->second < trace_.chunks.size() && trace_.chunks[at->second].name == name) {
    return &trace_.chunks[at->second];
  }
  if (at != chunk_at_.end() || indexed_ > trace_.chunks.size()) {  // the chunks changed other than by appending
    chunk_at_.clear();
    indexed_ = 0;
  }
  for (; indexed_ < trace_.chunks.size(); ++indexed_) chunk_at_.emplace(trace_.chunks[indexed_].name, indexed_);
  const auto found = chunk_at_.find(name);
  return found == chunk_at_.end() ? nullptr : &trace_.chunks[found->second];
}

std::vector<std::string> TraceSim::chunks_in_window() const {
  std::vector<std::string> out;
  for (const SimItem& i : current().items) {
    if (!i.turn) out.push_back(i.chunk);
  }
  return out;
}

void TraceSim::apply(const TraceStep& s, std::size_t index) {
  const StepWhere w{trace_, *this, index, s.op, " on branch '" + current_ + "'"};
  SimBranch& b = branches_.at(current_);
  switch (s.op) {
    case TraceOp::kAdmit:
    case TraceOp::kRecall: {
      const std::size_t at = check_insert(w, b, s);
      const int64_t tokens = count(*chunk(s.chunk));
      b.items.insert(b.items.begin() + static_cast<std::ptrdiff_t>(at), SimItem{false, s.chunk, tokens});
      b.evicted.erase(s.chunk);
      break;
    }
    case TraceOp::kTurn: b.items.push_back(SimItem{true, "", count(s.tokens)}); break;
    case TraceOp::kEvict: sim_evict(w, b, s); break;
    case TraceOp::kSlide: sim_slide(w, b, s); break;
    case TraceOp::kReorder: {
      check_reorder(w, b, s);
      b.placed_at = -1;
      std::size_t next = 0;
      for (SimItem& i : b.items) {
        if (i.turn) continue;
        const std::string name = s.order[next++];
        i.chunk = name;
        i.tokens = count(*chunk(name));
      }
      break;
    }
    case TraceOp::kPlace: b.placed_at = static_cast<int64_t>(index); break;
    case TraceOp::kFork: sim_fork(w, branches_, current_, s.branch); break;
    case TraceOp::kSwitch:
      if (!branches_.count(s.branch)) w.fail("branch", "'" + s.branch + "' is not a live branch");
      current_ = s.branch;
      break;
    case TraceOp::kCommit:
    case TraceOp::kDrop: sim_end_branch(w, branches_, current_, s); break;
    case TraceOp::kGenerate:
      if (b.items.empty() && !s.append) break;
      if (s.append) {
        const int64_t q = count(s.tokens.empty() ? trace_.probe : s.tokens);
        b.items.push_back(SimItem{true, "", q + s.max_tokens});
      }
      break;
    case TraceOp::kDisposable:
      w.known_chunk("chunk", s.chunk);
      if (find_chunk(b, s.chunk) == b.items.size()) w.fail("chunk", "'" + s.chunk + "' is not in the window" + w.on);
      break;
  }
}

}  // namespace orbit::trace_detail

namespace orbit {

namespace {

// An embedding chunk's grid: positive factors whose product (its row count) fits int64, so that
// EmbeddingSource::rows() is exact.
void check_grid(const std::string& file, std::size_t index, const TraceChunk& c) {
  const auto& g = c.media.grid;
  const std::string where = file + ": chunk " + std::to_string(index) + " ('" + c.name + "'): field 'embeddings.grid'";
  int64_t rows = 1;
  for (int64_t d : g) {
    ORBIT_CHECK(d >= 1, where << ": must be 3 positive integers, got [" << g[0] << ", " << g[1] << ", " << g[2] << "]");
    ORBIT_CHECK(!__builtin_mul_overflow(rows, d, &rows), where << ": [" << g[0] << ", " << g[1] << ", " << g[2]
                                                               << "] holds more rows than a 64-bit count (overflow)");
  }
}

}  // namespace

void validate_trace(const Trace& trace) {
  const std::string file = trace.source.empty() ? std::string("<trace>") : trace.source;
  ORBIT_CHECK(trace.format == kTraceFormat, file << ": top level: field 'format': '" << trace.format
                                                 << "' is not supported (expected '" << kTraceFormat << "')");
  ORBIT_CHECK(!trace.probe.empty(), file << ": top level: field 'probe': must not be empty");
  std::set<std::string> names;
  for (std::size_t i = 0; i < trace.chunks.size(); ++i) {
    const TraceChunk& c = trace.chunks[i];
    ORBIT_CHECK(!c.name.empty(), file << ": chunk " << i << ": field 'name': must not be empty");
    ORBIT_CHECK(names.insert(c.name).second, file << ": chunk " << i << " ('" << c.name << "'): field 'name': '"
                                                  << c.name << "' is used by an earlier chunk");
    if (c.embeddings) check_grid(file, i, c);
    ORBIT_CHECK(trace_detail::chunk_tokens(c) > 0,
                file << ": chunk " << i << " ('" << c.name << "'): field 'tokens': the chunk is empty");
  }
  trace_detail::TraceSim sim(trace);
  for (std::size_t i = 0; i < trace.steps.size(); ++i) {
    const TraceStep& s = trace.steps[i];
    if (s.op == TraceOp::kTurn) {
      ORBIT_CHECK(trace_detail::source_tokens(s.tokens) > 0,
                  file << ": step " << i << " (turn): field 'tokens': the turn is empty");
    }
    if (s.op == TraceOp::kFork) {
      ORBIT_CHECK(!s.branch.empty(), file << ": step " << i << " (fork): field 'branch': must not be empty");
    }
    sim.apply(s, i);
  }
}

}  // namespace orbit
