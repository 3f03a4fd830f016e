// The parts replay() (trace_replay.cpp) is built from: the trace's content resolved once for every policy
// (trace_resolve.cpp), the patch demands behind the offline bound (trace_demands.cpp) and a policy's totals
// over its steps (trace_totals.cpp). PolicyRun, which replays one policy, is trace_policy_run.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "orbit/planner/offline.h"
#include "orbit/trace.h"

namespace orbit::trace_detail {

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

// The name errors give the trace: its source file, else its name.
std::string file_of(const Trace& t);

// Every chunk's, the probe's and each step's tokens (sampled, tokenized or generated with `engine`), checked
// against the model: ids in its vocabulary, sizes within its positions, chunks distinct in content. Throws
// orbit::Error naming the file, the chunk or step, and the field.
Resolved resolve(const Trace& trace, Engine& engine);

// ---- patch demands for the offline bound ----------------------------------------------------------------

// Whether a policy forms patches the store keeps: orbit::forms_patches (orbit/trace.h).

struct DemandLog {
  std::vector<planner::Demand> demands;
  int64_t formations = 0;
  double form_tokens = 0;
};

// Logs the patches a plan forms or applies at `step` (one demand each, keyed by chunk and context signature).
void log_demands(const Plan& plan, const WindowPolicy& p, const ModelInfo& info, std::size_t step, DemandLog* log);

// The online formations beside the offline bound (compulsory, Belady, LRU) over the logged demands.
OfflineReport offline_report(const DemandLog& log, int64_t capacity);

// ---- totals ----------------------------------------------------------------------------------------------

// out.totals from out.steps.
void total_policy(PolicyReplay& out);

// Keeps, per step of `into`, the faster of its times and `again`'s (a later round of the same policy); throws
// when the round computed other forward tokens (the replay is not deterministic).
void keep_fastest(PolicyReplay& into, const PolicyReplay& again, int round);

}  // namespace orbit::trace_detail
