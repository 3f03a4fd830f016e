// The trace's content resolved once for every policy replay() runs (trace_replay_parts.h): chunks' tokens
// and embeddings, the probe and each step's turn or query, checked against the model.
#include <cstdio>
#include <map>

#include "orbit/common/error.h"
#include "trace_internal.h"
#include "trace_replay_parts.h"

namespace orbit::trace_detail {

namespace {

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
    case TokenSource::Kind::kRandom: return random_tokens(s.count, s.seed, info.vocab_size);
    case TokenSource::Kind::kSample: {
      check_vocab(s.prompt, info.vocab_size, where, field == "tokens" ? "prompt" : field + ".prompt");
      Window scratch = engine.new_window();
      GenerateOptions g;
      g.max_tokens = s.count;
      g.ignore_eos = true;  // `count` tokens: a sampled chunk's length is the trace's, not where a story ends
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

}  // namespace

std::string file_of(const Trace& t) { return t.source.empty() ? (t.name.empty() ? "<trace>" : t.name) : t.source; }

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
      rc.embeddings = random_embeddings(c.media, info.hidden_size);
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
      // What makes the rows: the seed, the std to the last bit (to_string's 6 decimals took 1e-7 and 2e-7 for one),
      // the row count, and where positions have three rows the grid (the engine's key holds it too).
      char std_text[32];
      std::snprintf(std_text, sizeof std_text, "%.17g", c.media.std);
      content = "e:" + std::to_string(c.media.seed) + ":" + std_text + ":" + std::to_string(rc.rows);
      if (info.position_rows == 3) {
        for (int64_t d : c.media.grid) content += ":" + std::to_string(d);
      }
    } else {
      rc.tokens = resolve_source(engine, c.tokens, where, "tokens");
      rc.rows = static_cast<int64_t>(rc.tokens.size());
      for (int64_t t : rc.tokens) content += std::to_string(t) + ",";
    }
    ORBIT_CHECK(rc.rows <= info.max_positions, where << ": field 'tokens': " << rc.rows << " tokens exceed the model's "
                                                     << info.max_positions << " positions");
    const auto [it, fresh] = seen.emplace(content, c.name);
    ORBIT_CHECK(fresh, where << ": field '" << (c.embeddings ? "embeddings" : "tokens") << "': same content as chunk '"
                             << it->second << "' (chunks are identified by content; give it another seed or tokens)");
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

}  // namespace orbit::trace_detail
