// Model::forward_batch (model.h) and Model::forward, its batch of one.
//
//   prepare_sequence     per sequence (forward_sequence.h): its input, past, positions, rope tables, checks
//   x                    every sequence's computed tokens' hidden states, concatenated [N = Σ R_i, hidden]
//   per layer            norm, content (K/V) and queries over all N rows at once; attention per sequence
//                        (CUDA) or per group of sequences with the same R (CPU: each member's keys written
//                        into its own slot of the group's buffers, AttentionGroup, and attend_batch over
//                        them; at heads too wide for the CPU kernel, slots of each member's own length and
//                        attend_slots over them), and for sequences
//                        whose past is a decode cache's slot per group over its buffers (cached_attention.cpp, every
//                        device); MLA sequences in the absorbed form (SequencePass::mla_absorbed, CPU) each on
//                        its own over its latent (mla_absorbed_attention); output projection and MLP over all N rows
//   logits               the rows asked for (each sequence's last, or all of its rows), one LM-head product
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attention.h"
#include "forward_batch.h"
#include "key_attention.h"
#include "orbit/common/error.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/rope.h"
#include "rope_table.h"

namespace orbit::runtime {

namespace detail {
namespace {

// The blocked products' groups are cut so that one group's keys and values take at most this many bytes:
// a group's layer writes them and its products read them straight after, and every such group of a forward
// writes into the same two buffers, so they stay in cache. Members over the budget attend alone. (The
// figures below were measured with groups of members with as many keys; the groups now take any lengths.)
// bench_batch --sections prefill after pasts of 300 tokens, K = 16 (bench/batch/README.md): MLA heads of
// 32 + 16 (790 KB a member) ran 0.93-0.98x one at a time as one group of 13 MB, 1.07-1.13x in groups of
// 256 KiB to 4 MiB, 0.98-1.00x at 8 MiB; GQA heads of 64 (160 KB a member) 1.13-1.14x in groups of one,
// 1.26-1.35x in groups of 1 MiB or more, where each product's fixed cost counts.
constexpr int64_t kBlockedGroupBytes = int64_t{2} << 20;

// The keys and values heads of a layer (H_k of AttentionGroup).
int64_t key_heads(const ModelConfig& c) { return c.attention() == AttentionKind::kMla ? c.num_heads : c.num_kv_heads; }

// Whether the batch's CPU groups go to the blocked products, whose buffers are head-major.
bool blocked_groups(const Model& m) {
  const ModelConfig& c = m.config();
  return !cpu_attention_kernel_takes(c.head_dim, c.v_head_dim(), m.dtype());
}

// A group of `members` (the same R, ascending): everything but its buffers.
AttentionGroup make_group(const BatchPass& b, std::vector<std::size_t> members) {
  AttentionGroup g;
  g.members = std::move(members);
  const SequencePass& first = b.seqs[g.members.front()];
  g.queries = first.rows;
  g.head_major = blocked_groups(b.model);
  const int64_t B = static_cast<int64_t>(g.members.size());
  std::vector<at::Tensor> qi;
  for (std::size_t i : g.members) {
    const int64_t S = b.seqs[i].past->length + b.seqs[i].tokens;
    g.keys = std::max(g.keys, S);
    if (g.head_major) g.slots.lengths.push_back(S);
    qi.push_back(b.seqs[i].query_index);
  }
  g.query_index = B == 1 ? first.query_index.unsqueeze(0) : at::stack(qi);
  if (B * g.queries != b.total_rows) {
    std::vector<int64_t> rows;
    for (std::size_t i : g.members) {
      for (int64_t r = 0; r < g.queries; ++r) rows.push_back(b.first_row[i] + r);
    }
    g.rows = at::tensor(at::ArrayRef<int64_t>(rows), at::kLong).to(b.model.device());
  }
  return g;
}

// The groups' buffers: a kernel group's its own, token-major; the blocked groups' slots views of one pair of
// flat buffers sized for the largest group, head-major (the groups of a layer run one after another, each
// writing before it reads).
void attach_buffers(const BatchPass& b, std::vector<AttentionGroup>& groups) {
  const ModelConfig& c = b.model.config();
  const int64_t heads = key_heads(c), dk = c.head_dim, dv = c.v_head_dim();
  const at::TensorOptions where = at::TensorOptions().dtype(b.model.dtype()).device(b.model.device());
  int64_t most_rows = 0;
  for (AttentionGroup& g : groups) {
    const int64_t B = static_cast<int64_t>(g.members.size());
    if (g.head_major) {
      HeadMajorSlots& s = g.slots;
      s.heads = heads;
      s.key_dim = dk;
      s.value_dim = dv;
      int64_t rows = 0;
      for (int64_t S : s.lengths) {
        s.first_rows.push_back(rows);
        rows += heads * S;
      }
      most_rows = std::max(most_rows, rows);
    } else {
      g.keys_buffer = at::empty({B, g.keys, heads, dk}, where);
      g.values_buffer = at::empty({B, g.keys, heads, dv}, where);
    }
  }
  if (most_rows == 0) return;
  const at::Tensor keys = at::empty({most_rows * dk}, where), values = at::empty({most_rows * dv}, where);
  for (AttentionGroup& g : groups) {
    if (!g.head_major) continue;
    g.slots.keys = keys;
    g.slots.values = values;
  }
}

// Members of the same R for the blocked products, cut into groups of at most kBlockedGroupBytes of keys and
// values (at least one member each): taken by their numbers of keys, so that a group's members are near in
// length (its score rows are as wide as its longest), each group's members then in batch order.
std::vector<std::vector<std::size_t>> blocked_cuts(const BatchPass& b, std::vector<std::size_t> members) {
  const ModelConfig& c = b.model.config();
  const int64_t row_bytes = key_heads(c) * (c.head_dim + c.v_head_dim()) * at::elementSize(b.model.dtype());
  auto keys = [&](std::size_t i) { return b.seqs[i].past->length + b.seqs[i].tokens; };
  std::stable_sort(members.begin(), members.end(), [&](std::size_t x, std::size_t y) { return keys(x) < keys(y); });
  std::vector<std::vector<std::size_t>> cuts;
  int64_t bytes = 0;
  for (std::size_t i : members) {
    const int64_t more = keys(i) * row_bytes;
    if (cuts.empty() || bytes + more > kBlockedGroupBytes) {
      cuts.emplace_back();
      bytes = 0;
    }
    cuts.back().push_back(i);
    bytes += more;
  }
  for (std::vector<std::size_t>& cut : cuts) std::sort(cut.begin(), cut.end());
  return cuts;
}

// Groups the sequences with computed tokens by R (for the blocked products cut by blocked_cuts), in batch
// order of their first member.
std::vector<AttentionGroup> make_groups(const BatchPass& b) {
  const bool blocked = blocked_groups(b.model);
  std::map<int64_t, std::vector<std::size_t>> by_queries;
  std::vector<int64_t> order;
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    const SequencePass& s = b.seqs[i];
    if (s.rows == 0 || s.past->cache != nullptr || s.mla_absorbed) continue;
    if (by_queries.find(s.rows) == by_queries.end()) order.push_back(s.rows);
    by_queries[s.rows].push_back(i);
  }
  std::vector<std::vector<std::size_t>> cuts;
  for (int64_t R : order) {
    if (!blocked) {
      cuts.push_back(std::move(by_queries[R]));
      continue;
    }
    for (std::vector<std::size_t>& cut : blocked_cuts(b, std::move(by_queries[R]))) cuts.push_back(std::move(cut));
  }
  std::stable_sort(cuts.begin(), cuts.end(), [](const auto& x, const auto& y) { return x.front() < y.front(); });
  std::vector<AttentionGroup> groups;
  for (std::vector<std::size_t>& cut : cuts) groups.push_back(make_group(b, std::move(cut)));
  attach_buffers(b, groups);
  return groups;
}

// Layer l's keys of a group into its buffers: member j's past's keys, then its input's, rotated by its own
// angles (MLA's expanded from the latent) into rows [0, its keys) of slot j, its values beside them. The
// past and the input are written apart (no copy joins them), as a single forward writes them.
void write_group_keys(const BatchPass& b, const AttentionGroup& g, const std::vector<LayerKV>& contents, int64_t l) {
  const Model& m = b.model;
  const ModelConfig& c = m.config();
  const LayerWeights& w = m.weights().layers[static_cast<std::size_t>(l)];
  const bool mla = c.attention() == AttentionKind::kMla;
  auto write = [&](const LayerKV& kv, const ops::RopeTables& t, const at::Tensor& k, const at::Tensor& v) {
    if (mla) {
      mla_keys_into(c, w, kv, &t, k, v);
    } else {
      rotate_into(c.rope, k, kv.k, t);
      v.copy_(kv.v);
    }
  };
  for (std::size_t j = 0; j < g.members.size(); ++j) {
    const std::size_t i = g.members[j];
    const ForwardPast& fp = *b.seqs[i].past;
    const ops::RopeTables& t = b.seqs[i].rope.key;
    const int64_t P = fp.length, T = contents[i].k.size(0);
    // Slot j as [S, H_k, d]: strided when head-major.
    const at::Tensor k = g.keys_of(j), v = g.values_of(j);
    if (P > 0) {
      const LayerKV& p = fp.past->layers[static_cast<std::size_t>(l)];
      write({p.k.to(m.device(), m.dtype()), p.v.to(m.device(), m.dtype())},
            {t.cos.narrow(0, 0, P), t.sin.narrow(0, 0, P)}, k.narrow(0, 0, P), v.narrow(0, 0, P));
    }
    write(contents[i], {t.cos.narrow(0, P, T), t.sin.narrow(0, P, T)}, k.narrow(0, P, T), v.narrow(0, P, T));
  }
}

// Puts a group's output rows into the layer's attention output: it is the output when it covers every row.
void place_rows(at::Tensor& out, const at::Tensor& rows, const at::Tensor& o) {
  if (!rows.defined()) {
    out = o;
  } else {
    out.index_copy_(0, rows, o);
  }
}

// Layer l's attention over the groups, into `out`.
void grouped_attention(const BatchPass& b, int64_t l, const std::vector<LayerKV>& contents, const at::Tensor& q,
                       at::Tensor& out) {
  const double scale = attention_scale(b.model.config());
  for (const AttentionGroup& g : b.groups) {
    const int64_t B = static_cast<int64_t>(g.members.size());
    const at::Tensor qg = (g.rows.defined() ? q.index_select(0, g.rows) : q).view({B, g.queries, q.size(1), q.size(2)});
    write_group_keys(b, g, contents, l);
    const at::Tensor o = g.head_major ? attend_slots(qg, g.slots, g.query_index, scale)
                                      : attend_batch(qg, g.keys_buffer, g.values_buffer, g.query_index, scale);
    place_rows(out, g.rows, o.view({B * g.queries, o.size(2)}));
  }
}

// Puts sequence i's attention output rows into the layer's: it is the output when they are every row.
void place_sequence(const BatchPass& b, std::size_t i, const at::Tensor& o, at::Tensor& out) {
  if (b.seqs[i].rows == b.total_rows) {
    out = o;
  } else {
    out.narrow(0, b.first_row[i], b.seqs[i].rows).copy_(o);
  }
}

// Layer l's attention of the uncached sequences each on its own (the paths a single forward takes on CUDA),
// and of the MLA sequences in the absorbed form (CPU), which no group takes.
void sequence_attention(const BatchPass& b, const LayerWeights& w, int64_t l, const std::vector<LayerKV>& contents,
                        const at::Tensor& q, at::Tensor& out) {
  const ModelConfig& c = b.model.config();
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    const SequencePass& s = b.seqs[i];
    if (s.rows == 0 || s.past->cache != nullptr || (b.grouped && !s.mla_absorbed)) continue;
    const at::Tensor qi = q.narrow(0, b.first_row[i], s.rows);
    if (s.mla_absorbed) {
      // The past's rows and the input's read apart, never joined (an MLA past is never paged).
      const ForwardPast& fp = *s.past;
      LayerKV past;
      if (fp.length > 0) {
        const LayerKV& p = fp.past->layers[static_cast<std::size_t>(l)];
        past = {p.k.to(b.model.device(), b.model.dtype()), p.v.to(b.model.device(), b.model.dtype())};
      }
      const AttentionStep step{c, w, qi, contents[i], s.rope.key, s.query_index, !s.recompute.partial};
      place_sequence(b, i, mla_absorbed_attention(step, fp.length > 0 ? &past : nullptr), out);
      continue;
    }
    const LayerKV keys = sequence_keys(b.model, s, contents[i], l);
    AttentionStep step{c, w, qi, keys, s.rope.key, s.query_index, !s.recompute.partial};
    ops::PagedAttentionInputs paged;
    if (s.paged != nullptr) {
      paged = paged_layer(*s.paged, l);
      step.paged = &paged;
    }
    place_sequence(b, i, c.attention() == AttentionKind::kMla ? mla_attention(step) : gqa_attention(step), out);
  }
}

// Layer l over the hidden states x [N, hidden]: attention, then the MLP, each added to the residual.
// Appends each sequence's content to its result when its options ask for it.
at::Tensor run_layer(const BatchPass& b, int64_t l, const at::Tensor& x, std::vector<ForwardResult>& results) {
  const Model& m = b.model;
  const ModelConfig& c = m.config();
  const LayerWeights& w = m.weights().layers[static_cast<std::size_t>(l)];
  for (const SequencePass& s : b.seqs) {
    if (s.options->before_layer && !s.past->announced) s.options->before_layer(l);
  }
  const at::Tensor h = rms_norm(x, w.attn_norm, c.rms_norm_eps);
  const bool mla = c.attention() == AttentionKind::kMla;
  const LayerKV all = mla ? mla_content(c, w, h) : gqa_content(c, w, h);
  // Each sequence's content, except where nothing reads it: a cached member's group reads its rows of `all`.
  std::vector<LayerKV> contents(b.seqs.size());
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    const SequencePass& s = b.seqs[i];
    if (s.past->cache != nullptr && !s.options->return_content && !s.options->key_attention) continue;
    LayerKV& content = contents[i];
    content = {all.k.narrow(0, b.first_row[i], s.rows), all.v.narrow(0, b.first_row[i], s.rows)};
    if (s.recompute.partial) {
      // Written over the cached content of every input token.
      const LayerKV& cached = s.options->cached[static_cast<std::size_t>(l)];
      content.k = cached.k.to(m.device(), m.dtype()).clone().index_copy_(0, s.recompute.selected, content.k);
      content.v = cached.v.to(m.device(), m.dtype()).clone().index_copy_(0, s.recompute.selected, content.v);
    }
    if (s.options->return_content) results[i].content.push_back(content);
  }
  const at::Tensor q = mla ? mla_queries(c, w, h, b.query_tables) : gqa_queries(c, w, h, b.query_tables);
  at::Tensor attention = at::empty({b.total_rows, c.num_heads * c.v_head_dim()}, x.options());
  if (b.grouped) grouped_attention(b, l, contents, q, attention);
  sequence_attention(b, w, l, contents, q, attention);
  for (const CachedGroup& g : b.cached) cached_attention(b, l, g, all, q, attention);
  add_key_attention(b, l, w, contents, q, results);
  // The residual sums and the gate taken in place on the products' results (each a tensor of its own): the
  // same elementwise values as x + dense(..), with no temporary per op.
  const at::Tensor y = dense(attention, w.wo).add_(x);
  const at::Tensor g = rms_norm(y, w.ffn_norm, c.rms_norm_eps);
  at::Tensor gate = dense(g, w.w_gate);
  return dense(silu_gate(gate).mul_(dense(g, w.w_up)), w.w_down).add_(y);
}

// float32 logits of the rows each sequence asks for (its last computed token, or every one), through one
// product with the LM head.
void batch_logits(const BatchPass& b, const at::Tensor& x, std::vector<ForwardResult>& results) {
  const Model& m = b.model;
  std::vector<int64_t> rows, counts;
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    const SequencePass& s = b.seqs[i];
    const LogitsMode mode = s.options->logits;
    const int64_t n = mode == LogitsMode::kNone ? 0 : mode == LogitsMode::kLast ? 1 : s.rows;
    for (int64_t r = s.rows - n; r < s.rows; ++r) rows.push_back(b.first_row[i] + r);
    counts.push_back(n);
  }
  if (rows.empty()) return;
  // The rows ascend; one range (every row of a decode step of single tokens, a single sequence's) is read
  // in place, with no index tensor or copy: the same values in the same layout.
  const auto n = static_cast<int64_t>(rows.size());
  at::Tensor picked;
  if (rows.back() - rows.front() + 1 == n) {
    picked = n == x.size(0) ? x : x.narrow(0, rows.front(), n);
  } else {
    picked = x.index_select(0, at::tensor(at::ArrayRef<int64_t>(rows), at::kLong).to(m.device()));
  }
  const at::Tensor logits =
      dense(rms_norm(picked, m.weights().final_norm, m.config().rms_norm_eps), m.weights().lm_head).to(at::kFloat);
  int64_t at_row = 0;
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    if (counts[i] == 0) continue;
    results[i].logits = b.seqs.size() == 1 ? logits : logits.narrow(0, at_row, counts[i]);
    at_row += counts[i];
  }
}

// The computed tokens' hidden states of every sequence in batch order [N, hidden]: the sequences whose tokens
// are all computed through one embedding lookup, the others (embeddings, partial recompute) as prepared.
at::Tensor batch_hidden(const Model& m, std::vector<SequencePass>& seqs, const std::vector<SequenceForward>& batch) {
  std::vector<int64_t> tokens;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].x.defined()) tokens.insert(tokens.end(), batch[i].input->tokens.begin(), batch[i].input->tokens.end());
  }
  const at::Tensor embedded = tokens.empty() ? at::Tensor() : m.embed(tokens);
  if (std::none_of(seqs.begin(), seqs.end(), [](const SequencePass& s) { return s.x.defined(); })) return embedded;
  std::vector<at::Tensor> xs;
  int64_t at_token = 0;
  for (SequencePass& s : seqs) {
    if (s.x.defined()) {
      xs.push_back(std::move(s.x));
    } else {
      xs.push_back(embedded.narrow(0, at_token, s.rows));
      at_token += s.rows;
    }
  }
  return xs.size() == 1 ? xs.front() : at::cat(xs, 0);
}

// Every sequence's computed tokens' 1-D positions in batch order, or nullopt when one has a grid.
std::optional<std::vector<int64_t>> flat_positions(const std::vector<SequencePass>& seqs) {
  std::vector<int64_t> all;
  for (const SequencePass& s : seqs) {
    const at::Tensor p = computed_positions(s.positions, s.recompute);
    if (p.dim() != 1 || p.scalar_type() != at::kLong || !p.is_cpu()) return std::nullopt;
    const at::Tensor c = p.contiguous();
    const int64_t* data = c.data_ptr<int64_t>();
    all.insert(all.end(), data, data + c.size(0));
  }
  return all;
}

// The computed tokens' query angles' cos/sin of every sequence in batch order [N, rotary_dim/2]. On the CPU
// with 1-D positions (and under dynamic NTK, windows no longer than its anchor length) they are rows of the
// model's table (rope_table.h), bit for bit the angles' own; else one angle computation for the batch,
// except under dynamic NTK, whose frequencies depend on each sequence's window length.
ops::RopeTables batch_query_rope(const Model& m, const std::vector<SequencePass>& seqs, RopeTableCache* table) {
  const ModelConfig& c = m.config();
  const at::ScalarType dtype = ops::rope_table_dtype(m.dtype());
  int64_t window = 0;  // the longest: the table applies to every window when it applies to it
  for (const SequencePass& s : seqs) window = std::max(window, s.window_len);
  if (table != nullptr && m.device().is_cpu() && RopeTableCache::applies(c.rope, window)) {
    if (const auto positions = flat_positions(seqs)) {
      if (auto rows = table->gather(c.rope, *positions, dtype, window)) return *std::move(rows);
    }
  }
  if (c.rope.scaling == RopeScaling::kDynamicNtk) {
    std::vector<at::Tensor> cos, sin;
    for (const SequencePass& s : seqs) {
      const at::Tensor angles =
          rope_angles(c.rope, computed_positions(s.positions, s.recompute).to(m.device()), s.window_len);
      const ops::RopeTables t = ops::rope_tables(angles, dtype, m.device());
      cos.push_back(t.cos);
      sin.push_back(t.sin);
    }
    return cos.size() == 1 ? ops::RopeTables{cos.front(), sin.front()}
                           : ops::RopeTables{at::cat(cos, 0), at::cat(sin, 0)};
  }
  // An M-RoPE model may mix 1-D positions (p read as the grid column (p, p, p)) with grids.
  const bool grids =
      std::any_of(seqs.begin(), seqs.end(), [](const SequencePass& s) { return s.positions.dim() == 2; });
  std::vector<at::Tensor> positions;
  for (const SequencePass& s : seqs) {
    const at::Tensor p = computed_positions(s.positions, s.recompute);
    positions.push_back(grids && p.dim() == 1 ? p.unsqueeze(0).expand({3, p.size(0)}) : p);
  }
  const at::Tensor all = positions.size() == 1 ? positions.front() : at::cat(positions, -1);
  return ops::rope_tables(rope_angles(c.rope, all.to(m.device()), seqs.front().window_len), dtype, m.device());
}

// prepare_sequence for every sequence; in a batch of several, an error names the sequence.
std::vector<SequencePass> prepare_all(const Model& m, const std::vector<SequenceForward>& batch,
                                      RopeTableCache* table) {
  std::vector<SequencePass> seqs;
  seqs.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch.size() == 1) {
      seqs.push_back(prepare_sequence(m, batch[i], table));
      continue;
    }
    try {
      seqs.push_back(prepare_sequence(m, batch[i], table));
    } catch (const Error& e) {
      std::string what = e.what();
      const std::string head = "forward: ";
      if (what.rfind(head, 0) == 0) what = what.substr(head.size());
      throw Error(head + "sequence " + std::to_string(i) + ": " + what, __FILE__, __LINE__);
    }
    ORBIT_CHECK(seqs.back().num_layers == seqs.front().num_layers,
                "forward: every sequence of a batch runs the same layers (options.max_layers): sequence 0 runs "
                    << seqs.front().num_layers << ", sequence " << i << " " << seqs.back().num_layers);
  }
  return seqs;
}

}  // namespace
}  // namespace detail

std::vector<ForwardResult> Model::forward_batch(const std::vector<SequenceForward>& batch) const {
  c10::InferenceMode guard;
  ORBIT_CHECK(!batch.empty(), "forward: an empty batch (give at least one sequence)");
  detail::BatchPass b{
      *this, detail::prepare_all(*this, batch, rope_table_.get()), {}, 0, {}, false, {}, {}, rope_table_.get()};
  for (detail::SequencePass& s : b.seqs) {
    b.first_row.push_back(b.total_rows);
    b.total_rows += s.rows;
  }
  at::Tensor x = detail::batch_hidden(*this, b.seqs, batch);
  b.query_tables = detail::batch_query_rope(*this, b.seqs, rope_table_.get());
  b.grouped = !device_.is_cuda();
  if (b.grouped) b.groups = detail::make_groups(b);
  b.cached = detail::make_cached_groups(b);

  std::vector<ForwardResult> results(b.seqs.size());
  const int64_t num_layers = b.seqs.front().num_layers;
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    if (b.seqs[i].options->return_content) results[i].content.reserve(static_cast<std::size_t>(num_layers));
  }
  for (int64_t l = 0; l < num_layers; ++l) x = detail::run_layer(b, l, x, results);
  detail::finish_cached(b);
  detail::finish_key_attention(b, results);
  detail::batch_logits(b, x, results);
  return results;
}

ForwardResult Model::forward(const ForwardInput& input, const PastKV* past, const ForwardOptions& options) const {
  return std::move(forward_batch({SequenceForward{&input, past, &options}}).front());
}

}  // namespace orbit::runtime
