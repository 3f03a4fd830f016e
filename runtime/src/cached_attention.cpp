// Attention over a decode cache's buffers (forward_batch.h, decode_cache.h): the members of a cached group
// write their new rows into their slots, then their queries meet every row of their own slot. On the CPU a
// kernel reads each member's own rows in place (ops/cached_attention_op.h); elsewhere (and for dynamic-NTK
// RoPE, whose keys are rotated when read) one batched product of ATen ops over the slots [lo, lo + count):
//
//   Q        [count, H_a, G·R, d_k]   members' queries scattered to their slots (zero elsewhere)
//   scores = Q · K_slotsᵀ             [count·H_a, G·R, S], S the longest member's rows; rows past a member's
//                                     own (later tokens, padding) hidden
//   out    = softmax(scores) · V      back to [B·R, H·d_v] in the members' order
//
// G = H / H_a query heads share a kv head (GQA); MLA's rows are per head (H_a = H, G = 1), or in the latent
// layout one row per token that every head reads (cached_attention_mla.cpp). Scores and the softmax are float32.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "attention.h"
#include "forward_batch.h"
#include "ops/cached_attention_op.h"
#include "orbit/common/error.h"
#include "orbit/runtime/rope.h"
#include "rope_table.h"

namespace orbit::runtime::detail {

namespace {

// Largest product (elements of the [slots, heads, queries, keys, width] temporary) attended by broadcast.
constexpr int64_t kBroadcastElements = int64_t{1} << 20;

at::Tensor long_tensor(const std::vector<int64_t>& v, const c10::Device& device) {
  return at::tensor(at::ArrayRef<int64_t>(v), at::kLong).to(device);
}

}  // namespace

std::optional<ops::RopeTables> table_read_tables(const Model& m, const DecodeCacheState& s, int64_t lo, int64_t keys,
                                                 const std::vector<int64_t>& windows, RopeTableCache* table) {
  const ModelConfig& c = m.config();
  if (table == nullptr || !m.device().is_cpu() || c.position_rows() != 1 || !s.positions.is_cpu() ||
      !s.positions.is_contiguous()) {
    return std::nullopt;
  }
  const int64_t window = *std::max_element(windows.begin(), windows.end());
  if (!RopeTableCache::applies(c.rope, window)) return std::nullopt;
  // A slot not read turns by zero angles: position 0's (0 · inv[i] = +0).
  const std::vector<int64_t> zeros(static_cast<std::size_t>(keys), 0);
  std::vector<RopeTableCache::Run> runs;
  const int64_t* positions = s.positions.data_ptr<int64_t>();
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const int64_t slot = lo + static_cast<int64_t>(i);
    runs.push_back({windows[i] < 0 ? zeros.data() : positions + slot * s.capacity, keys});
  }
  return table->gather(c.rope, runs, ops::rope_table_dtype(m.dtype()), window);
}

ops::RopeTables read_tables(const Model& m, const DecodeCacheState& s, int64_t lo, int64_t keys,
                            const std::vector<int64_t>& windows, RopeTableCache* table) {
  if (auto rows = table_read_tables(m, s, lo, keys, windows, table)) return *std::move(rows);
  const ModelConfig& c = m.config();
  std::vector<at::Tensor> angles;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const int64_t slot = lo + static_cast<int64_t>(i);
    if (windows[i] < 0) {
      angles.push_back(
          at::zeros({keys, c.rope.rotary_dim / 2}, at::TensorOptions().dtype(at::kDouble).device(m.device())));
      continue;
    }
    const at::Tensor p = s.positions.select(0, slot).narrow(0, 0, keys);  // [S, rows]
    angles.push_back(rope_angles(c.rope, c.position_rows() == 1 ? p.select(1, 0) : p.t(), windows[i]));
  }
  return ops::rope_tables(at::cat(angles, 0), ops::rope_table_dtype(m.dtype()), m.device());
}

namespace {

// The new rows' positions into the members' slots (positions [R] or a grid [rows, R] each). On the CPU they
// are stored in place: a decode step's one position per member would otherwise cost four ATen ops.
void write_positions(const Model& m, const CachedGroup& g, const std::vector<at::Tensor>& positions) {
  DecodeCacheState& s = *g.cache;
  const int64_t rows = m.config().position_rows();
  const bool in_place = s.positions.is_cpu() && s.positions.is_contiguous() &&
                        std::all_of(positions.begin(), positions.end(), [](const at::Tensor& p) {
                          return p.is_cpu() && p.scalar_type() == at::kLong && p.is_contiguous();
                        });
  if (in_place) {
    int64_t* out = s.positions.data_ptr<int64_t>();
    for (std::size_t j = 0; j < g.slots.size(); ++j) {
      const int64_t* p = positions[j].data_ptr<int64_t>();
      int64_t* row = out + (g.slots[j] * s.capacity + g.lengths[j]) * rows;
      for (int64_t t = 0; t < g.queries; ++t) {
        // A 1-D position p is the grid column (p, .., p).
        for (int64_t r = 0; r < rows; ++r) row[t * rows + r] = positions[j].dim() == 1 ? p[t] : p[r * g.queries + t];
      }
    }
    return;
  }
  for (std::size_t j = 0; j < g.slots.size(); ++j) {
    s.positions.select(0, g.slots[j])
        .narrow(0, g.lengths[j], g.queries)
        .copy_(token_major(positions[j], rows, m.device()));
  }
}

// The rows of keys[l] viewed [slots·H_a·capacity, d] that the members' new rows go to, in member order.
std::vector<int64_t> write_rows(const CachedGroup& g, int64_t heads, int64_t capacity) {
  std::vector<int64_t> write;
  write.reserve(g.slots.size() * static_cast<std::size_t>(g.queries * heads));
  for (std::size_t j = 0; j < g.slots.size(); ++j) {
    for (int64_t r = 0; r < g.queries; ++r) {
      for (int64_t h = 0; h < heads; ++h) write.push_back((g.slots[j] * heads + h) * capacity + g.lengths[j] + r);
    }
  }
  return write;
}

// Where the members' new rows go in the kept content (CachedGroup::kept_at).
void place_kept(CachedGroup& g) {
  const DecodeCacheState& s = *g.cache;
  bool any = false;
  std::vector<int64_t> at(g.slots.size(), -1);
  for (std::size_t j = 0; j < g.slots.size(); ++j) {
    const int64_t from = s.kept_from[static_cast<std::size_t>(g.slots[j])];
    if (from < 0) continue;
    at[j] = g.slots[j] * s.kept_capacity + g.lengths[j] - from;
    any = true;
  }
  if (any) g.kept_at = std::move(at);
}

// One of layer l's kept buffers (`kept`, kept_k or kept_v) given the members' new rows of it, `fresh`
// [B·R, heads, dim] in member order. On the CPU copied in place, a block per member: ATen's index_copy costs
// more than the copy at a decode step's row per sequence.
void write_kept(const CachedGroup& g, const at::Tensor& kept, const at::Tensor& fresh) {
  const int64_t R = g.queries;
  if (kept.is_cpu() && kept.is_contiguous() && fresh.is_cpu() && fresh.is_contiguous() &&
      fresh.scalar_type() == kept.scalar_type()) {
    const auto row = static_cast<std::size_t>(kept.size(2) * kept.size(3) * kept.element_size());
    char* out = static_cast<char*>(kept.data_ptr());
    const char* in = static_cast<const char*>(fresh.data_ptr());
    for (std::size_t j = 0; j < g.kept_at.size(); ++j) {
      if (g.kept_at[j] < 0) continue;
      std::memcpy(out + static_cast<std::size_t>(g.kept_at[j]) * row, in + j * static_cast<std::size_t>(R) * row,
                  static_cast<std::size_t>(R) * row);
    }
    return;
  }
  std::vector<int64_t> index, source;
  for (std::size_t j = 0; j < g.kept_at.size(); ++j) {
    for (int64_t r = 0; r < R && g.kept_at[j] >= 0; ++r) {
      index.push_back(g.kept_at[j] + r);
      source.push_back(static_cast<int64_t>(j) * R + r);
    }
  }
  const c10::Device device = kept.device();
  kept.flatten(0, 1).index_copy_(0, long_tensor(index, device), fresh.index_select(0, long_tensor(source, device)));
}

// One of layer l's buffers (`into`: keys[l] or values[l], [slots, H_a, capacity, d]) given the members' new
// rows, `fresh` [B·R, H_a, d] in member order, at their slots' next rows. On the CPU copied in place, a row
// per (member, token, head): two index_copy_ a layer cost more than the copies at a decode step's row per
// sequence. Elsewhere through write_index.
void write_new_rows(const CachedGroup& g, const at::Tensor& into, const at::Tensor& fresh) {
  const int64_t H = into.size(1), capacity = into.size(2), d = into.size(3), R = g.queries;
  if (into.is_cpu() && into.is_contiguous() && fresh.is_cpu() && fresh.scalar_type() == into.scalar_type() &&
      fresh.dim() == 3 && fresh.size(1) == H && fresh.size(2) == d && fresh.stride(2) == 1) {
    const auto size = static_cast<std::size_t>(into.element_size());
    const auto row = static_cast<std::size_t>(d) * size;
    char* out = static_cast<char*>(into.data_ptr());
    const char* in = static_cast<const char*>(fresh.data_ptr());
    const int64_t token_stride = fresh.stride(0), head_stride = fresh.stride(1);
    for (std::size_t j = 0; j < g.slots.size(); ++j) {
      for (int64_t r = 0; r < R; ++r) {
        const int64_t token = static_cast<int64_t>(j) * R + r;
        for (int64_t h = 0; h < H; ++h) {
          const int64_t to = ((g.slots[j] * H + h) * capacity + g.lengths[j] + r) * d;
          std::memcpy(out + static_cast<std::size_t>(to) * size,
                      in + static_cast<std::size_t>(token * token_stride + h * head_stride) * size, row);
        }
      }
    }
    return;
  }
  const at::Tensor index =
      g.write_index.defined() ? g.write_index : long_tensor(write_rows(g, H, capacity), into.device());
  into.view({-1, d}).index_copy_(0, index, fresh.reshape({-1, d}));
}

// The ATen path's indices: the members' batch rows, their places among the slots [lo, lo + count), the mask.
void index_for_aten(const BatchPass& b, CachedGroup& g) {
  const c10::Device device = b.model.device();
  const int64_t R = g.queries, B = static_cast<int64_t>(g.members.size());
  std::vector<int64_t> member, qidx(static_cast<std::size_t>(g.count * R), g.keys - 1), rows;
  for (int64_t j = 0; j < B; ++j) {
    const auto J = static_cast<std::size_t>(j);
    for (int64_t r = 0; r < R; ++r) {
      qidx[static_cast<std::size_t>((g.slots[J] - g.lo) * R + r)] = g.lengths[J] + r;
      rows.push_back(g.first_rows[J] + r);
    }
    member.push_back(g.slots[J] - g.lo);
  }
  g.in_slot_order = B == g.count;
  for (int64_t j = 0; j < B && g.in_slot_order; ++j) g.in_slot_order = member[static_cast<std::size_t>(j)] == j;
  g.member_index = long_tensor(member, device);
  if (B * R != b.total_rows) g.rows = long_tensor(rows, device);
  const at::Tensor key_index = at::arange(g.keys, at::TensorOptions().dtype(at::kLong).device(device));
  g.hidden = (key_index.view({1, 1, g.keys}) > long_tensor(qidx, device).view({g.count, R, 1}))
                 .view({g.count, 1, 1, R, g.keys});
}

// The members' slots grown for their new rows, those rows' positions written, and the group's indices.
CachedGroup make_cached_group(const BatchPass& b, DecodeCacheState* cache, std::vector<std::size_t> members) {
  const Model& m = b.model;
  CachedGroup g;
  g.cache = cache;
  g.members = std::move(members);
  g.queries = b.seqs[g.members.front()].rows;
  g.kernel = !cache->rotate_at_read && ops::cached_attention_available(m.device(), m.dtype());
  const int64_t R = g.queries;
  int64_t hi = 0;
  g.lo = cache->slots;
  std::vector<at::Tensor> positions;
  for (std::size_t i : g.members) {
    const SequencePass& seq = b.seqs[i];
    ORBIT_CHECK(std::find(g.slots.begin(), g.slots.end(), seq.past->slot) == g.slots.end(),
                "forward: slot " << seq.past->slot << " of a decode cache is the past of two sequences of one batch");
    g.slots.push_back(seq.past->slot);
    g.lengths.push_back(seq.past->length);
    g.first_rows.push_back(b.first_row[i]);
    g.keys = std::max(g.keys, seq.past->length + R);
    g.lo = std::min(g.lo, seq.past->slot);
    hi = std::max(hi, seq.past->slot);
    positions.push_back(seq.positions);
  }
  g.count = hi - g.lo + 1;
  cache->reserve(cache->slots, g.keys);  // make_cached_groups reserved it for every group: a no-op
  write_positions(m, g, positions);
  // The CPU writes the new rows in place (write_new_rows).
  if (!m.device().is_cpu()) g.write_index = long_tensor(write_rows(g, cache->heads, cache->capacity), m.device());
  place_kept(g);
  // The ATen path's indices and mask; the latent layout's members read their own slots (cached_attention_mla.cpp).
  if (!g.kernel && !cache->latent) index_for_aten(b, g);
  g.in_order = true;
  for (std::size_t j = 0; j < g.first_rows.size() && g.in_order; ++j) {
    g.in_order = g.first_rows[j] == g.first_rows.front() + static_cast<int64_t>(j) * R;
  }
  const auto rows = static_cast<int64_t>(g.members.size()) * R;
  if (cache->rotate_at_read) {
    std::vector<int64_t> windows(static_cast<std::size_t>(g.count), -1);
    for (std::size_t j = 0; j < g.slots.size(); ++j) {
      windows[static_cast<std::size_t>(g.slots[j] - g.lo)] = b.seqs[g.members[j]].window_len;
    }
    g.read_tables = read_tables(m, *cache, g.lo, g.keys, windows, b.rope_table);
  } else if (g.in_order) {  // the members' rows of the batch's tables: all of them in a decode step of one cache
    const ops::RopeTables& t = b.query_tables;
    g.new_tables = rows == t.cos.size(0) ? t
                                         : ops::RopeTables{t.cos.narrow(0, g.first_rows.front(), rows),
                                                           t.sin.narrow(0, g.first_rows.front(), rows)};
  } else {
    std::vector<at::Tensor> cos, sin;
    for (int64_t first : g.first_rows) {
      cos.push_back(b.query_tables.cos.narrow(0, first, R));
      sin.push_back(b.query_tables.sin.narrow(0, first, R));
    }
    g.new_tables = {at::cat(cos, 0), at::cat(sin, 0)};
  }
  return g;
}

// Dynamic NTK: the attended keys [count, H_a, S, d_k] rotated now (MLA: their k_pe part).
at::Tensor rotate_read(const ModelConfig& c, const CachedGroup& g, const at::Tensor& keys) {
  const int64_t C = keys.size(0), H = keys.size(1), S = keys.size(2), d = keys.size(3);
  const int64_t from = c.attention() == AttentionKind::kMla ? c.mla.qk_nope_head_dim : 0;
  const at::Tensor part = keys.narrow(3, from, d - from).permute({0, 2, 1, 3}).reshape({C * S, H, d - from});
  const at::Tensor rotated = rotate(c.rope, part, g.read_tables).view({C, S, H, d - from}).permute({0, 2, 1, 3});
  return from == 0 ? rotated : at::cat({keys.narrow(3, 0, from), rotated}, 3);
}

}  // namespace

std::vector<CachedGroup> make_cached_groups(const BatchPass& b) {
  std::map<std::pair<DecodeCacheState*, int64_t>, std::vector<std::size_t>> by;
  std::vector<std::pair<DecodeCacheState*, int64_t>> order;
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    DecodeCacheState* cache = b.seqs[i].past->cache;
    if (cache == nullptr) continue;
    const auto key = std::make_pair(cache, b.seqs[i].rows);
    if (by.find(key) == by.end()) order.push_back(key);
    by[key].push_back(i);
  }
  // Every group's rows reserved before any group computes its indices: a later group that grew the buffers
  // would move the rows an earlier group's write index points into (a sequence joining with a longer past
  // and another query count than the running ones').
  for (const auto& key : order) {
    int64_t keys = 0, kept = 0;
    for (std::size_t i : by[key]) {
      const ForwardPast& p = *b.seqs[i].past;
      keys = std::max(keys, p.length + b.seqs[i].rows);
      const int64_t from = key.first->kept_from[static_cast<std::size_t>(p.slot)];
      if (from >= 0) kept = std::max(kept, p.length - from + b.seqs[i].rows);
    }
    key.first->reserve(key.first->slots, keys);
    if (kept > 0) key.first->reserve_kept(kept);
  }
  std::vector<CachedGroup> groups;
  for (const auto& key : order) groups.push_back(make_cached_group(b, key.first, std::move(by[key])));
  return groups;
}

void cached_attention(const BatchPass& b, int64_t l, const CachedGroup& g, const LayerKV& all, const at::Tensor& q,
                      at::Tensor& out) {
  const ModelConfig& c = b.model.config();
  DecodeCacheState& s = *g.cache;
  const auto L = static_cast<std::size_t>(l);
  // The members' new rows, in attention form, into their slots: one view of `all` when they lie in order
  // (every decode step whose sequences all read one cache), else gathered.
  const int64_t R = g.queries;
  LayerKV fresh;
  const int64_t rows = static_cast<int64_t>(g.members.size()) * R;
  if (g.in_order) {
    fresh = rows == all.k.size(0)
                ? all
                : LayerKV{all.k.narrow(0, g.first_rows.front(), rows), all.v.narrow(0, g.first_rows.front(), rows)};
  } else {
    std::vector<at::Tensor> ks, vs;
    for (int64_t first : g.first_rows) {
      ks.push_back(all.k.narrow(0, first, R));
      vs.push_back(all.v.narrow(0, first, R));
    }
    fresh = {at::cat(ks, 0), at::cat(vs, 0)};
  }
  if (!g.kept_at.empty()) {
    write_kept(g, s.kept_k[L], fresh.k);
    write_kept(g, s.kept_v[L], fresh.v);
  }
  const auto [k, v] = s.attention_rows(l, fresh, s.rotate_at_read ? nullptr : &g.new_tables);
  write_new_rows(g, s.keys[L], k);
  if (s.latent) {
    cached_latent_attention(b, l, g, q, out);
    return;
  }
  write_new_rows(g, s.values[L], v);
  if (g.kernel) {
    ops::CachedAttentionInputs in{q,         s.keys[L],    s.values[L], g.slots,
                                  g.lengths, g.first_rows, g.queries,   attention_scale(c)};
    ops::cached_attention(in, out);
    return;
  }

  const int64_t H = s.heads, G = c.num_heads / H, C = g.count, S = g.keys;
  const int64_t B = static_cast<int64_t>(g.members.size());
  at::Tensor keys = s.keys[L].narrow(0, g.lo, C).narrow(2, 0, S);
  if (s.rotate_at_read) keys = rotate_read(c, g, keys);
  const at::Tensor values = s.values[L].narrow(0, g.lo, C).narrow(2, 0, S);
  const at::Tensor qm = (g.rows.defined() ? q.index_select(0, g.rows) : q)
                            .view({B, R, H, G, s.dk})
                            .permute({0, 2, 3, 1, 4})
                            .reshape({B, H, G * R, s.dk});
  at::Tensor queries = qm;
  if (!g.in_slot_order) queries = at::zeros({C, H, G * R, s.dk}, q.options()).index_copy_(0, g.member_index, qm);
  // Small products (decode steps of small models) as one broadcast multiply and sum each: a batched GEMM
  // pays a BLAS call per (slot, head) matrix there, which costs more than the arithmetic.
  const bool small = C * H * G * R * S * std::max(s.dk, s.dv) <= kBroadcastElements;
  at::Tensor scores =
      small ? (queries.unsqueeze(3) * keys.unsqueeze(2)).sum(-1)
            : at::bmm(queries.reshape({C * H, G * R, s.dk}), keys.reshape({C * H, S, s.dk}).transpose(1, 2));
  scores = scores.to(at::kFloat).mul_(attention_scale(c)).view({C, H, G, R, S});
  scores.masked_fill_(g.hidden, -std::numeric_limits<float>::infinity());
  const at::Tensor probs = at::softmax(scores, -1).to(values.scalar_type()).view({C, H, G * R, S});
  at::Tensor o = small ? (probs.unsqueeze(-1) * values.unsqueeze(2)).sum(3)
                       : at::bmm(probs.view({C * H, G * R, S}), values.reshape({C * H, S, s.dv}));
  o = o.view({C, H, G, R, s.dv});
  if (!g.in_slot_order) o = o.index_select(0, g.member_index);
  o = o.permute({0, 3, 1, 2, 4}).reshape({B * R, c.num_heads * s.dv});
  if (g.rows.defined()) {
    out.index_copy_(0, g.rows, o);
  } else {
    out = o;
  }
}

at::Tensor read_rotated_keys(const ModelConfig& c, const CachedGroup& g, int64_t l, std::size_t j, int64_t S) {
  const DecodeCacheState& s = *g.cache;
  const at::Tensor held = s.keys[static_cast<std::size_t>(l)].select(0, g.slots[j]).narrow(1, 0, S);  // [H_a, S, d]
  // The slot's rows of the read tables (make_cached_group: rows [0, keys) of each slot at its member's window).
  const int64_t first = (g.slots[j] - g.lo) * g.keys;
  const ops::RopeTables t{g.read_tables.cos.narrow(0, first, S), g.read_tables.sin.narrow(0, first, S)};
  // The part RoPE turns: the whole key, MLA's k_pe after q_nope's width (expanded) or after c_KV (latent).
  const bool mla = c.attention() == AttentionKind::kMla;
  const int64_t from = s.latent ? c.mla.kv_lora_rank : mla ? c.mla.qk_nope_head_dim : 0, d = held.size(2);
  const at::Tensor rotated = rotate(c.rope, held.narrow(2, from, d - from).transpose(0, 1), t).transpose(0, 1);
  return from == 0 ? rotated : at::cat({held.narrow(2, 0, from), rotated}, 2);
}

void finish_cached(const BatchPass& b) {
  for (const CachedGroup& g : b.cached) {
    for (std::size_t j = 0; j < g.slots.size(); ++j) {
      g.cache->lengths[static_cast<std::size_t>(g.slots[j])] = g.lengths[j] + g.queries;
    }
  }
}

}  // namespace orbit::runtime::detail
