// make_trace (orbit/trace.h): generated traces of web, video and tool-using agents, and of five agent
// patterns (browse, coding, videoqa, fanout, rag) that use the model's full positions.
#include <algorithm>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/trace.h"
#include "trace_internal.h"
#include "trace_text.h"

namespace orbit {

namespace {

using trace_detail::Rng;
using trace_detail::TextRole;

// Emits steps while simulating the window, so every generated trace validates, and keeps the window
// within a token budget by evicting old live turns (the first turn, the system prompt, stays).
class Builder {
 public:
  // `full`: the window may use the model's positions up to the probe and a generated answer.
  Builder(const MakeTraceOptions& o, Trace* t, bool full = false)
      : o_(o), t_(*t), sim_(*t), rng_(o.seed * 0x9e3779b97f4a7c15ull + 17), text_(o.seed, o.text_tokens) {
    budget_ = full ? o.max_positions - 24 : std::max<int64_t>(o.max_positions * 3 / 4 - 16, 16);
    if (o.text_tokens) {
      sim_.set_counter([count = o.text_tokens](const TokenSource& s) {
        if (s.kind != TokenSource::Kind::kText) return trace_detail::source_tokens(s);
        return count(s.text) + (s.bos ? 1 : 0);
      });
    }
  }

  trace_detail::StoryText& text() { return text_; }

  // A text chunk of `role`, at least n tokens (by the model's tokenizer when make_trace has it).
  void text_chunk(const std::string& name, int64_t n, TextRole role) {
    TraceChunk c;
    c.name = name;
    c.tokens = TokenSource::from_text(text_.make(role, n));
    t_.chunks.push_back(c);
  }
  // A live text turn of `role`, at least n tokens.
  void turn(int64_t n, const std::string& note, TextRole role) {
    TokenSource src = TokenSource::from_text(text_.make(role, n));
    make_room(text_.tokens(src.text));
    TraceStep s;
    s.op = TraceOp::kTurn;
    s.tokens = std::move(src);
    s.note = note;
    emit(s);
  }

  Rng& rng() { return rng_; }
  const trace_detail::TraceSim& sim() const { return sim_; }
  int64_t next_seed() { return static_cast<int64_t>(rng_.next() >> 2); }

  void text_chunk(const std::string& name, int64_t n, bool sampled) {
    TraceChunk c;
    c.name = name;
    if (sampled) {
      c.tokens.kind = TokenSource::Kind::kSample;
      c.tokens.count = n;
      c.tokens.seed = static_cast<uint64_t>(next_seed());
    } else {
      c.tokens = TokenSource::random(n, static_cast<uint64_t>(next_seed()));
    }
    t_.chunks.push_back(c);
  }

  // A screenshot / frame: embeddings with a (1, 4, n/4) grid on M-RoPE models, else n random ids.
  void media_chunk(const std::string& name, int64_t n) {
    if (o_.position_rows != 3) return text_chunk(name, n, false);
    TraceChunk c;
    c.name = name;
    c.embeddings = true;
    c.media.grid = {1, 4, std::max<int64_t>(n / 4, 1)};
    c.media.seed = static_cast<uint64_t>(next_seed());
    t_.chunks.push_back(c);
  }

  void emit(TraceStep s) {
    sim_.apply(s, t_.steps.size());
    t_.steps.push_back(std::move(s));
  }

  // Evicts old turns (index 1: the oldest after the system turn), then slides, until `extra` fits.
  void make_room(int64_t extra) {
    while (sim_.tokens() + extra > budget_) {
      if (sim_.turns() > 1) {
        TraceStep s;
        s.op = TraceOp::kEvict;
        s.turn = 1;
        s.note = "keep the window within its budget";
        emit(s);
      } else if (sim_.chunks_in_window().size() > 1) {
        drop_oldest();
      } else {
        break;
      }
    }
  }

  void admit(const std::string& chunk) {
    make_room(trace_detail::chunk_tokens(*sim_.chunk(chunk)));
    TraceStep s;
    s.op = TraceOp::kAdmit;
    s.chunk = chunk;
    emit(s);
  }
  void recall(const std::string& chunk, const std::string& note) {
    make_room(trace_detail::chunk_tokens(*sim_.chunk(chunk)));
    TraceStep s;
    s.op = TraceOp::kRecall;
    s.chunk = chunk;
    s.note = note;
    emit(s);
  }
  void evict_turn(int64_t index, const std::string& note) {
    TraceStep s;
    s.op = TraceOp::kEvict;
    s.turn = index;
    s.note = note;
    emit(s);
  }
  void turn(int64_t n, const std::string& note, bool sampled = false) {
    make_room(n);
    TraceStep s;
    s.op = TraceOp::kTurn;
    s.tokens = TokenSource::random(n, static_cast<uint64_t>(next_seed()));
    if (sampled) s.tokens.kind = TokenSource::Kind::kSample;
    s.note = note;
    emit(s);
  }
  void evict(const std::string& chunk, const std::string& note) {
    TraceStep s;
    s.op = TraceOp::kEvict;
    s.chunk = chunk;
    s.note = note;
    emit(s);
  }
  // Evicts the oldest chunk: a slide, or by name while the order is the policy's (after place).
  void drop_oldest() {
    if (sim_.current().placed_at < 0) return slide(1);
    evict(sim_.chunks_in_window().front(), "slide by name: the order after place is the policy's");
  }
  void slide(int64_t n) {
    TraceStep s;
    s.op = TraceOp::kSlide;
    s.count = n;
    emit(s);
  }
  void reorder(std::vector<std::string> order, const std::string& note) {
    TraceStep s;
    s.op = TraceOp::kReorder;
    s.order = std::move(order);
    s.note = note;
    emit(s);
  }
  void simple(TraceOp op, const std::string& branch = "", const std::string& note = "") {
    TraceStep s;
    s.op = op;
    s.branch = branch;
    s.note = note;
    emit(s);
  }
  void generate(int64_t max_tokens, bool append, int64_t query_tokens = 0) {
    if (append) make_room(max_tokens + (query_tokens > 0 ? query_tokens : probe_tokens()));
    TraceStep s;
    s.op = TraceOp::kGenerate;
    s.max_tokens = max_tokens;
    s.append = append;
    if (query_tokens > 0) s.tokens = TokenSource::random(query_tokens, static_cast<uint64_t>(next_seed()));
    emit(s);
  }
  // A speculative branch: fork, an action and a look at its outcome, then commit or drop.
  void speculate(const std::string& name, bool commit) {
    simple(TraceOp::kFork, name, "try an action on a branch");
    turn(6, "speculative action");
    generate(4, false);
    simple(commit ? TraceOp::kCommit : TraceOp::kDrop, name, commit ? "keep the branch" : "abandon the branch");
  }

  int64_t probe_tokens() const {
    return t_.probe.kind == TokenSource::Kind::kText ? text_.tokens(t_.probe.text) + (t_.probe.bos ? 1 : 0)
                                                     : trace_detail::source_tokens(t_.probe);
  }

  std::vector<std::string> evicted_among(const std::string& prefix) const {
    const trace_detail::EvictedNames& evicted = sim_.current().evicted;
    std::vector<std::string> out;
    for (std::size_t k = 0, n = evicted.count_prefixed(prefix); k < n; ++k) out.push_back(evicted.prefixed(prefix, k));
    return out;
  }
  // One of the evicted chunks whose names start with `prefix`, uniformly at random in name order ("" when none):
  // the pick evicted_among then an index would make, without listing them.
  std::string random_evicted(const std::string& prefix) {
    const trace_detail::EvictedNames& evicted = sim_.current().evicted;
    const std::size_t n = evicted.count_prefixed(prefix);
    if (n == 0) return "";
    return evicted.prefixed(prefix, static_cast<std::size_t>(rng_.below(static_cast<int64_t>(n))));
  }

 private:
  const MakeTraceOptions& o_;
  Trace& t_;
  trace_detail::TraceSim sim_;
  Rng rng_;
  trace_detail::StoryText text_;
  int64_t budget_ = 0;
};

int64_t default_size(const MakeTraceOptions& o, int64_t divisor) {
  return o.chunk_tokens > 0 ? o.chunk_tokens : std::max<int64_t>(o.max_positions / divisor, 4);
}

void make_web(const MakeTraceOptions& o, Builder& b) {
  const int64_t shot = default_size(o, 16);
  b.turn(8, "system prompt");
  for (int64_t i = 0; i < o.steps; ++i) {
    const std::string name = "shot" + std::to_string(i);
    b.media_chunk(name, shot);
    b.admit(name);
    while (b.sim().chunks_in_window().size() > 3) b.drop_oldest();
    b.turn(6, "action");
    b.turn(10, "observation", o.sample_text);
    if (i % 4 == 3) {
      const std::string back = b.random_evicted("shot");
      if (!back.empty()) {
        b.recall(back, "look back at an earlier screenshot");
        b.turn(4, "question about it");
        b.generate(4, false);
        b.evict(back, "done looking back");
      }
    }
    const std::vector<std::string> shots = b.sim().chunks_in_window();
    if (i % 5 == 4 && shots.size() >= 2) {
      std::vector<std::string> moved = shots;
      std::rotate(moved.begin(), moved.begin() + 1, moved.end());
      b.reorder(moved, "attend: the oldest kept screenshot moved last");
      b.generate(4, false);
      b.reorder(shots, "back to time order");
    }
    if (i % 6 == 5) b.speculate("try" + std::to_string(i), i % 12 != 5);
  }
}

void make_video(const MakeTraceOptions& o, Builder& b) {
  const int64_t frame = default_size(o, 16);
  const int64_t frames = 6;
  b.turn(8, "system prompt");
  for (int64_t f = 0; f < frames; ++f) {
    const std::string name = "frame" + std::to_string(f);
    b.media_chunk(name, frame);
    b.admit(name);
  }
  std::string looked_away;
  for (int64_t i = 0; i < o.steps; ++i) {
    while (b.sim().turns() > 3) {
      TraceStep s;
      s.op = TraceOp::kEvict;
      s.turn = 1;
      s.note = "drop the oldest prompt";
      b.emit(s);
    }
    b.turn(8, "prompt " + std::to_string(i));
    b.generate(4, false);
    if (!looked_away.empty()) {
      b.recall(looked_away, "look back at the frame");
      b.generate(4, false);
      looked_away.clear();
    }
    std::vector<std::string> in = b.sim().chunks_in_window();
    if (i % 3 == 1 && in.size() >= 3) {
      for (int k = 0; k < 2; ++k) {
        const std::size_t pick = static_cast<std::size_t>(b.rng().below(static_cast<int64_t>(in.size()) - 1));
        std::rotate(in.begin() + static_cast<std::ptrdiff_t>(pick), in.begin() + static_cast<std::ptrdiff_t>(pick) + 1,
                    in.end());
      }
      b.reorder(in, "the frames this prompt is about moved last");
    }
    in = b.sim().chunks_in_window();
    if (i % 4 == 2 && in.size() >= 3) {
      looked_away = in[static_cast<std::size_t>(b.rng().below(static_cast<int64_t>(in.size())))];
      b.evict(looked_away, "set a frame aside");
      b.turn(6, "reason without it");
    }
    if (i % 5 == 4) b.speculate("spec" + std::to_string(i), false);
  }
}

void make_agent(const MakeTraceOptions& o, Builder& b) {
  const int64_t doc = default_size(o, 12);
  b.turn(8, "system prompt");
  for (int64_t i = 0; i < o.steps; ++i) {
    const std::string name = "doc" + std::to_string(i);
    b.text_chunk(name, doc, o.sample_text);
    b.admit(name);
    while (b.sim().chunks_in_window().size() > 4) b.drop_oldest();
    b.turn(5, "thought");
    b.generate(4, true, 2);
    if (i % 3 == 2) {
      const std::string back = b.random_evicted("doc");
      if (!back.empty()) {
        b.recall(back, "look back at a document");
        while (b.sim().chunks_in_window().size() > 4) b.drop_oldest();
      }
    }
    if (i % 4 == 3) b.simple(TraceOp::kPlace, "", "let the planner order the documents");
    std::vector<std::string> docs = b.sim().chunks_in_window();
    if (i % 5 == 1 && docs.size() >= 2) {
      for (std::size_t k = docs.size() - 1; k > 0; --k) {
        std::swap(docs[k], docs[static_cast<std::size_t>(b.rng().below(static_cast<int64_t>(k) + 1))]);
      }
      b.reorder(docs, "re-rank the documents");
    }
    if (i % 7 == 6 && !docs.empty()) {
      TraceStep s;
      s.op = TraceOp::kDisposable;
      s.chunk = b.sim().chunks_in_window().front();
      s.note = "is the oldest document's conditioning load-bearing?";
      b.emit(s);
    }
    if (i % 6 == 5) b.speculate("tool" + std::to_string(i), i % 12 != 5);
  }
}

// ---- agent patterns (story-like text chunks, turns and probe; the window uses the model's positions) ----
//
// browse   a browsing agent: page screens (chunks) slide over a growing transcript of actions and
//          observations; every 4th step it looks back at an earlier page, then sets it aside again
// coding   a coding tool loop: files read into the window, tool outputs appended and dropped once used,
//          a file edited (its new version replaces the old one where it was) and re-read
// videoqa  a video QA agent: a clip's frames held while questions come and go; frames re-examined in a
//          new order (the ones a question is about moved last), one set aside and brought back
// fanout   multi-agent fan-out: a shared document set, then per round sub-agents forked over it, each
//          dropping the documents outside its task and working; one is committed, the others dropped
// rag      RAG re-rank: each turn retrieves k documents from a corpus (most retrieved before), the window
//          holds them in rank order after the system prompt, then the question and an answer

void make_browse(const MakeTraceOptions& o, Builder& b) {
  const int64_t page = default_size(o, 8);
  b.turn(16, "system prompt", TextRole::kSystem);
  for (int64_t i = 0; i < o.steps; ++i) {
    const std::string name = "page" + std::to_string(i);
    b.text_chunk(name, page, TextRole::kPage);
    b.admit(name);
    while (b.sim().chunks_in_window().size() > 3) b.drop_oldest();
    b.turn(8, "action", TextRole::kAction);
    b.turn(12, "observation", TextRole::kObservation);
    b.generate(4, false);
    if (i % 4 == 3) {
      const std::string back = b.random_evicted("page");
      if (!back.empty()) {
        b.recall(back, "look back at an earlier page");
        b.turn(6, "question about it", TextRole::kQuestion);
        b.generate(4, false);
        b.evict(back, "done looking back");
      }
    }
  }
}

void make_coding(const MakeTraceOptions& o, Builder& b) {
  const int64_t file = default_size(o, 10);
  const int64_t files = 4;
  b.turn(16, "system prompt", TextRole::kSystem);
  std::vector<int64_t> version(static_cast<std::size_t>(files), 0);
  auto name = [&](int64_t f) {
    return "file" + std::to_string(f) + "v" + std::to_string(version[static_cast<std::size_t>(f)]);
  };
  for (int64_t f = 0; f < files; ++f) {
    b.text_chunk(name(f), file, TextRole::kFile);
    b.admit(name(f));
  }
  for (int64_t i = 0; i < o.steps; ++i) {
    b.turn(8, "tool call", TextRole::kToolCall);
    b.turn(24, "tool output", TextRole::kToolOutput);
    b.generate(4, false);
    // The tool output has been read: drop it and the call (turn 1 is the oldest after the system prompt).
    while (b.sim().turns() > 1) b.evict_turn(1, "tool output used; dropped");
    if (i % 3 == 2) {
      const int64_t f = b.rng().below(files);
      const std::vector<std::string> in = b.sim().chunks_in_window();
      const std::string old = name(f);
      const auto at = std::find(in.begin(), in.end(), old);
      std::string before;
      if (at != in.end() && at + 1 != in.end()) before = *(at + 1);
      b.evict(old, "file edited");
      ++version[static_cast<std::size_t>(f)];
      b.text_chunk(name(f), file, TextRole::kFile);
      TraceStep s;
      s.op = TraceOp::kAdmit;
      s.chunk = name(f);
      s.before = before;
      s.note = "re-read the edited file where it was";
      b.emit(s);
    }
  }
}

void make_videoqa(const MakeTraceOptions& o, Builder& b) {
  const int64_t frame = default_size(o, 12);
  const int64_t frames = 6;
  b.turn(16, "system prompt", TextRole::kSystem);
  for (int64_t f = 0; f < frames; ++f) {
    const std::string n = "frame" + std::to_string(f);
    b.text_chunk(n, frame, TextRole::kFrame);
    b.admit(n);
  }
  std::string aside;
  for (int64_t i = 0; i < o.steps; ++i) {
    while (b.sim().turns() > 2) b.evict_turn(1, "drop the previous question");
    b.turn(10, "question " + std::to_string(i), TextRole::kQuestion);
    b.generate(4, false);
    std::vector<std::string> in = b.sim().chunks_in_window();
    if (i % 2 == 1 && in.size() >= 3) {
      const std::size_t pick = static_cast<std::size_t>(b.rng().below(static_cast<int64_t>(in.size()) - 1));
      std::rotate(in.begin() + static_cast<std::ptrdiff_t>(pick), in.begin() + static_cast<std::ptrdiff_t>(pick) + 1,
                  in.end());
      b.reorder(in, "the frame this question is about moved last");
      b.generate(4, false);
    }
    if (!aside.empty()) {
      b.recall(aside, "bring the frame back");
      aside.clear();
    } else if (i % 3 == 2) {
      in = b.sim().chunks_in_window();
      aside = in[static_cast<std::size_t>(b.rng().below(static_cast<int64_t>(in.size())))];
      b.evict(aside, "set a frame aside");
    }
  }
}

void make_fanout(const MakeTraceOptions& o, Builder& b) {
  const int64_t doc = default_size(o, 10);
  const int64_t docs = 5;
  b.turn(16, "system prompt", TextRole::kSystem);
  for (int64_t d = 0; d < docs; ++d) {
    const std::string n = "doc" + std::to_string(d);
    b.text_chunk(n, doc, TextRole::kDocument);
    b.admit(n);
  }
  for (int64_t i = 0; i < o.steps; ++i) {
    const int64_t agents = 3;
    const int64_t keep = b.rng().below(agents);
    for (int64_t a = 0; a < agents; ++a) {
      const std::string branch = "r" + std::to_string(i) + "a" + std::to_string(a);
      b.simple(TraceOp::kFork, branch, "sub-agent " + std::to_string(a));
      std::vector<std::string> in = b.sim().chunks_in_window();
      const std::size_t drop = static_cast<std::size_t>(b.rng().below(static_cast<int64_t>(in.size())));
      b.evict(in[drop], "outside this sub-agent's task");
      b.turn(10, "sub-task", TextRole::kSubtask);
      b.generate(4, false);
      b.simple(a == keep ? TraceOp::kCommit : TraceOp::kDrop, branch, a == keep ? "merge its result" : "discard");
    }
    // Back on main: recall what the committed sub-agent dropped, drop its turns beyond the latest.
    for (const std::string& gone : b.evicted_among("doc")) b.recall(gone, "the shared set again");
    while (b.sim().turns() > 2) b.evict_turn(1, "older sub-task results summarised away");
  }
}

void make_rag(const MakeTraceOptions& o, Builder& b) {
  const int64_t doc = default_size(o, 10);
  const int64_t corpus = 8, k = 5;
  b.turn(16, "system prompt", TextRole::kSystem);
  for (int64_t d = 0; d < corpus; ++d) b.text_chunk("doc" + std::to_string(d), doc, TextRole::kDocument);
  std::vector<int64_t> ranked;
  for (int64_t i = 0; i < o.steps; ++i) {
    // Retrieval: mostly the same documents, re-scored: swap one neighbour pair, and one new document in.
    if (ranked.empty()) {
      for (int64_t d = 0; d < k; ++d) ranked.push_back(d);
    } else {
      const std::size_t a = static_cast<std::size_t>(b.rng().below(k - 1));
      std::swap(ranked[a], ranked[a + 1]);
      if (i % 2 == 0) {
        std::vector<int64_t> out;
        for (int64_t d = 0; d < corpus; ++d) {
          if (std::find(ranked.begin(), ranked.end(), d) == ranked.end()) out.push_back(d);
        }
        ranked[static_cast<std::size_t>(b.rng().below(k))] =
            out[static_cast<std::size_t>(b.rng().below(static_cast<int64_t>(out.size())))];
      }
    }
    while (b.sim().turns() > 1) b.evict_turn(1, "the previous question and answer are not kept");
    for (const std::string& in : b.sim().chunks_in_window()) {
      const int64_t d = std::stoll(in.substr(3));
      if (std::find(ranked.begin(), ranked.end(), d) == ranked.end()) b.evict(in, "not retrieved this turn");
    }
    for (int64_t d : ranked) {
      const std::string n = "doc" + std::to_string(d);
      const std::vector<std::string> in = b.sim().chunks_in_window();
      if (std::find(in.begin(), in.end(), n) != in.end()) continue;
      const auto& ev = b.sim().current().evicted;
      if (ev.count(n) > 0) {
        b.recall(n, "retrieved again");
      } else {
        b.admit(n);
      }
    }
    // Rank order over the documents the window holds: where a tokenizer makes the k documents too long
    // for the window's budget, admitting the last ones made room by dropping the oldest.
    const std::vector<std::string> held = b.sim().chunks_in_window();
    std::vector<std::string> order;
    for (int64_t d : ranked) {
      const std::string n = "doc" + std::to_string(d);
      if (std::find(held.begin(), held.end(), n) != held.end()) order.push_back(n);
    }
    if (order != held) b.reorder(order, "rank order");
    b.turn(12, "question", TextRole::kQuestion);
    b.generate(6, true);
  }
}

}  // namespace

Trace make_trace(const MakeTraceOptions& o) {
  static const std::vector<std::string> kinds = {"web",    "video",   "agent",  "browse",
                                                 "coding", "videoqa", "fanout", "rag"};
  ORBIT_CHECK(
      std::find(kinds.begin(), kinds.end(), o.kind) != kinds.end(),
      "make_trace: kind '" << o.kind << "' is not one of web, video, agent, browse, coding, videoqa, fanout, rag");
  ORBIT_CHECK(o.steps >= 1 && o.steps <= kMaxTraceSteps,
              "make_trace: steps must be in [1, " << kMaxTraceSteps << "], got " << o.steps);
  // Past 2^40 the budgets computed from it (three quarters of it) would overflow; no model has that many.
  ORBIT_CHECK(o.max_positions >= 64 && o.max_positions <= (int64_t{1} << 40),
              "make_trace: max_positions must be in [64, 2^40], got " << o.max_positions);
  ORBIT_CHECK(o.position_rows == 1 || o.position_rows == 3,
              "make_trace: position_rows must be 1 (RoPE) or 3 (M-RoPE), got " << o.position_rows);
  ORBIT_CHECK(o.chunk_tokens >= 0 && o.chunk_tokens <= o.max_positions / 8,
              "make_trace: chunk_tokens must be in [0, max_positions / 8 = " << o.max_positions / 8 << "], got "
                                                                             << o.chunk_tokens);
  // Only web's observations and agent's documents are drawn as random ids that sampled text can replace.
  ORBIT_CHECK(!o.sample_text || o.kind == "web" || o.kind == "agent",
              "make_trace: sample_text applies to kinds web and agent only (kind '"
                  << o.kind << "' has no random-id text to sample)");
  Trace t;
  t.name = o.kind + "-" + std::to_string(o.steps) + "-seed" + std::to_string(o.seed);
  t.description = "generated by orbit make-trace --kind " + o.kind + " --steps " + std::to_string(o.steps) +
                  " --seed " + std::to_string(o.seed);
  t.probe = TokenSource::random(4, o.seed + 1);
  {
    const bool full = o.kind != "web" && o.kind != "video" && o.kind != "agent";
    Builder b(o, &t, full);
    // Agent patterns are text throughout: the fidelity probe is a question too (short: it and a generated
    // answer must fit behind the window's positions).
    if (full) t.probe = TokenSource::from_text(b.text().make(TextRole::kQuestion, 1));
    if (o.kind == "web") make_web(o, b);
    if (o.kind == "video") make_video(o, b);
    if (o.kind == "agent") make_agent(o, b);
    if (o.kind == "browse") make_browse(o, b);
    if (o.kind == "coding") make_coding(o, b);
    if (o.kind == "videoqa") make_videoqa(o, b);
    if (o.kind == "fanout") make_fanout(o, b);
    if (o.kind == "rag") make_rag(o, b);
  }
  validate_trace(t);
  return t;
}

}  // namespace orbit
