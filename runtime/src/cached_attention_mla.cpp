// Attention over a decode cache in the latent layout (MLA on the CPU, decode_cache.h): the members' rows are
// [c_KV ‖ RoPE(k_pe)] per token, one for every head, and the members attend in the absorbed form
// (attention_mla.cpp), each member over its own slot's rows, read in place:
//
//   q_abs  = [q_nope_h·W_UK_h ‖ q_pe_h]                 [R·H, r_kv + d_rope]   a member's queries
//   scores = q_abs · rowsᵀ · scale                      [R·H, S]               S = its slot's rows, float32
//   lat    = softmax(scores) · rows[:, :r_kv]           [R·H, r_kv]            query r sees rows [0, length + r]
//   out    = W_UV_h · lat_h                             [R, H·d_v]             (all members at once)
//
// Two matrix products per member, each reading the slot's rows once for every head (the cached-attention
// kernel, one query row at a time, would read them once per head: 16 times for DeepSeek-V2-Lite). Under
// dynamic-NTK RoPE the rows hold k_pe before rotation ([c_KV ‖ k_pe]: its angles change with the window's
// length): each member's S rows are copied with k_pe rotated at its window (the group's read tables) first.
#include <ATen/ATen.h>

#include <limits>
#include <vector>

#include "attention.h"
#include "decode_cache_state.h"
#include "forward_batch.h"

namespace orbit::runtime::detail {

namespace {

// One member's attended latent into `lat` [R·H, r_kv] (contiguous): its queries q_abs [R·H, r_kv + d_rope]
// over the first `length` + R rows of its slot, `rows` [capacity, r_kv + d_rope].
void member_latent(const ModelConfig& c, const at::Tensor& q_abs, const at::Tensor& rows, int64_t length, int64_t R,
                   at::Tensor lat) {
  const int64_t S = length + R, H = c.num_heads;
  const at::Tensor keys = rows.narrow(0, 0, S);
  at::Tensor scores = at::mm(q_abs, keys.t()).to(at::kFloat).mul_(attention_scale(c));
  if (R > 1) {
    // Query r sees rows [0, length + r].
    const at::TensorOptions index = at::TensorOptions().dtype(at::kLong);
    const at::Tensor hidden =
        at::arange(S, index).view({1, 1, S}) > at::arange(length, length + R, index).view({R, 1, 1});
    scores.view({R, H, S}).masked_fill_(hidden, -std::numeric_limits<float>::infinity());
  }
  const at::Tensor p = at::softmax(scores, -1).to(rows.scalar_type());
  at::mm_out(lat, p, keys.narrow(1, 0, c.mla.kv_lora_rank));
}

// Dynamic NTK: member j's first S rows [S, r_kv + d_rope] of its slot `rows` with k_pe rotated by its slot's
// rows of the group's read tables (make_cached_group: rows [0, keys) of each slot at its member's window).
at::Tensor rotated_rows(const ModelConfig& c, const CachedGroup& g, const at::Tensor& rows, std::size_t j, int64_t S) {
  const int64_t r = c.mla.kv_lora_rank, first = (g.slots[j] - g.lo) * g.keys;
  const ops::RopeTables t{g.read_tables.cos.narrow(0, first, S), g.read_tables.sin.narrow(0, first, S)};
  const at::Tensor held = rows.narrow(0, 0, S);
  const at::Tensor pe = rotate(c.rope, held.narrow(1, r, c.mla.qk_rope_head_dim).unsqueeze(1), t).squeeze(1);
  return at::cat({held.narrow(1, 0, r), pe}, 1);
}

}  // namespace

void cached_latent_attention(const BatchPass& b, int64_t l, const CachedGroup& g, const at::Tensor& q,
                             at::Tensor& out) {
  const ModelConfig& c = b.model.config();
  const LayerWeights& w = b.model.weights().layers[static_cast<std::size_t>(l)];
  const at::Tensor& keys = g.cache->keys[static_cast<std::size_t>(l)];
  const int64_t R = g.queries, B = static_cast<int64_t>(g.members.size()), rows = B * R, H = c.num_heads;
  // The members' queries, in member order: a view of q when their rows lie in order, else gathered.
  at::Tensor qm;
  if (g.in_order) {
    qm = q.narrow(0, g.first_rows.front(), rows);
  } else {
    std::vector<at::Tensor> parts;
    for (const int64_t first : g.first_rows) parts.push_back(q.narrow(0, first, R));
    qm = at::cat(parts, 0);
  }
  const at::Tensor q_abs = mla_absorbed_queries(c, w, qm).view({rows * H, -1});
  at::Tensor lat = at::empty({rows * H, c.mla.kv_lora_rank}, q.options());
  for (int64_t j = 0; j < B; ++j) {
    const auto J = static_cast<std::size_t>(j);
    const at::Tensor held = keys.select(0, g.slots[J]).select(0, 0);
    const at::Tensor rows = g.cache->rotate_at_read ? rotated_rows(c, g, held, J, g.lengths[J] + R) : held;
    member_latent(c, q_abs.narrow(0, j * R * H, R * H), rows, g.lengths[J], R, lat.narrow(0, j * R * H, R * H));
  }
  const at::Tensor o = mla_absorbed_output(c, w, lat.view({rows, H * c.mla.kv_lora_rank}));
  if (g.in_order && rows == out.size(0)) {
    out = o;
  } else if (g.in_order) {
    out.narrow(0, g.first_rows.front(), rows).copy_(o);
  } else {
    for (int64_t j = 0; j < B; ++j) {
      out.narrow(0, g.first_rows[static_cast<std::size_t>(j)], R).copy_(o.narrow(0, j * R, R));
    }
  }
}

}  // namespace orbit::runtime::detail
