// DecodeCache (decode_cache.h): slots, growth, and writing a past into a slot.
#include "orbit/runtime/decode_cache.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "attention.h"
#include "decode_cache_state.h"
#include "forward_sequence.h"
#include "orbit/common/error.h"
#include "orbit/runtime/paged_past.h"
#include "orbit/runtime/rope.h"
#include "rope_table.h"

namespace orbit::runtime {

namespace detail {

int64_t DecodeCacheState::new_slot() {
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    if (lengths[s] < 0) {
      lengths[s] = 0;
      kept_from[s] = -1;
      return static_cast<int64_t>(s);
    }
  }
  lengths.push_back(0);
  kept_from.push_back(-1);
  reserve(static_cast<int64_t>(lengths.size()), capacity);
  return static_cast<int64_t>(lengths.size()) - 1;
}

void DecodeCacheState::reserve(int64_t slots_needed, int64_t capacity_needed) {
  if (slots_needed <= slots && capacity_needed <= capacity) return;
  const int64_t new_slots = slots_needed <= slots ? slots : std::max(slots_needed, 2 * slots);
  const int64_t new_capacity = capacity_needed <= capacity ? capacity : std::max(capacity_needed, 2 * capacity);
  const at::TensorOptions where = at::TensorOptions().dtype(model->dtype()).device(model->device());
  // The old rows copied and every other row zeroed (the ATen path reads rows past a slot's length, masked:
  // they must be finite), each written once.
  const bool had = slots > 0 && capacity > 0;
  auto grown = [&](const at::Tensor& old, int64_t width) {
    if (!old.defined() || !had) return at::zeros({new_slots, heads, new_capacity, width}, where);
    at::Tensor t = at::empty({new_slots, heads, new_capacity, width}, where);
    t.narrow(0, 0, slots).narrow(2, 0, capacity).copy_(old);
    t.narrow(0, 0, slots).narrow(2, capacity, new_capacity - capacity).zero_();
    t.narrow(0, slots, new_slots - slots).zero_();
    return t;
  };
  for (std::size_t l = 0; l < keys.size(); ++l) {
    keys[l] = grown(keys[l], dk);
    if (!latent) values[l] = grown(values[l], dv);
  }
  at::Tensor p = at::zeros({new_slots, new_capacity, model->config().position_rows()}, where.dtype(at::kLong));
  if (positions.defined() && slots > 0 && capacity > 0) p.narrow(0, 0, slots).narrow(1, 0, capacity).copy_(positions);
  positions = p;
  slots = new_slots;
  capacity = new_capacity;
  if (kept_capacity > 0) reserve_kept(kept_capacity);  // the kept content's slots follow
}

void DecodeCacheState::reserve_kept(int64_t rows_needed) {
  const int64_t had_slots = kept_capacity > 0 ? kept_k.front().size(0) : 0;
  if (rows_needed <= kept_capacity && had_slots == slots) return;
  const int64_t new_capacity = rows_needed <= kept_capacity ? kept_capacity : std::max(rows_needed, 2 * kept_capacity);
  const ModelConfig& c = model->config();
  const at::TensorOptions where = at::TensorOptions().dtype(model->dtype()).device(model->device());
  // Rows are read only once a forward wrote them: the new buffers need no zeroing.
  auto grown = [&](const at::Tensor& old, const ContentShape& shape) {
    at::Tensor t = at::empty({slots, new_capacity, shape.heads, shape.dim}, where);
    if (had_slots > 0) t.narrow(0, 0, had_slots).narrow(1, 0, kept_capacity).copy_(old);
    return t;
  };
  kept_k.resize(keys.size());
  kept_v.resize(keys.size());
  for (std::size_t l = 0; l < keys.size(); ++l) {
    kept_k[l] = grown(kept_k[l], c.content_k_shape());
    kept_v[l] = grown(kept_v[l], c.content_v_shape());
  }
  kept_capacity = new_capacity;
}

void DecodeCacheState::fit_kept() {
  if (kept_capacity == 0) return;
  int64_t longest = 0;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    if (lengths[s] >= 0) longest = std::max(longest, kept_rows(static_cast<int64_t>(s)));
  }
  if (longest == 0) {
    // Kept while the burst's keeping slots kept a quarter of their rows; stale rows are never read (a slot's
    // kept row is read only once a forward wrote it). Else reserve_kept makes them again for the next row kept.
    if (kept_capacity > 4 * burst_kept) release_kept();
    return;
  }
  if (longest > kept_capacity / 4) return;
  const int64_t new_capacity = 2 * longest;
  for (std::size_t l = 0; l < kept_k.size(); ++l) {
    kept_k[l] = kept_k[l].narrow(1, 0, new_capacity).contiguous();
    kept_v[l] = kept_v[l].narrow(1, 0, new_capacity).contiguous();
  }
  kept_capacity = new_capacity;
}

void DecodeCacheState::release_kept() {
  kept_k.clear();
  kept_v.clear();
  kept_capacity = 0;
}

void DecodeCacheState::fit_main() {
  int64_t used = 0, longest = 0;  // slots up to the last open one; the most rows an open slot holds
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    if (lengths[s] < 0) continue;
    used = static_cast<int64_t>(s) + 1;
    longest = std::max(longest, lengths[s]);
  }
  if (used == 0) {
    // Kept for the next burst when the one that ended needed a quarter of them in each dimension, else
    // released (reserve makes them again for the next slot opened). Stale rows stay finite.
    const bool keep = slots <= 4 * burst_slots && capacity <= 4 * std::max<int64_t>(burst_rows, 1);
    burst_slots = burst_rows = burst_kept = 0;
    lengths.clear();
    kept_from.clear();
    if (keep) return;
    release_kept();  // their slots go with the main buffers'
    for (std::size_t l = 0; l < keys.size(); ++l) keys[l] = values[l] = at::Tensor();
    positions = at::Tensor();
    slots = capacity = 0;
    return;
  }
  const int64_t new_slots = used <= slots / 4 ? 2 * used : slots;
  const int64_t new_capacity =
      longest <= capacity / 4 ? std::min(capacity, std::max<int64_t>(2 * longest, 1)) : capacity;
  if (new_slots == slots && new_capacity == capacity) return;
  for (std::size_t l = 0; l < keys.size(); ++l) {
    keys[l] = keys[l].narrow(0, 0, new_slots).narrow(2, 0, new_capacity).contiguous();
    if (!latent) values[l] = values[l].narrow(0, 0, new_slots).narrow(2, 0, new_capacity).contiguous();
  }
  positions = positions.narrow(0, 0, new_slots).narrow(1, 0, new_capacity).contiguous();
  // The slots past `used` are free: their entries go with them (new_slot appends again).
  lengths.resize(static_cast<std::size_t>(std::min(used, new_slots)));
  kept_from.resize(lengths.size());
  for (std::size_t l = 0; l < kept_k.size() && kept_capacity > 0; ++l) {
    kept_k[l] = kept_k[l].narrow(0, 0, new_slots).contiguous();
    kept_v[l] = kept_v[l].narrow(0, 0, new_slots).contiguous();
  }
  slots = new_slots;
  capacity = new_capacity;
}

void DecodeCacheState::check_open(int64_t slot, const char* what) const {
  ORBIT_CHECK(slot >= 0 && slot < static_cast<int64_t>(lengths.size()) && lengths[static_cast<std::size_t>(slot)] >= 0,
              what << ": slot " << slot << " of the decode cache is not open");
}

int64_t DecodeCacheState::kept_rows(int64_t slot) const {
  const int64_t from = kept_from[static_cast<std::size_t>(slot)];
  return from < 0 ? 0 : lengths[static_cast<std::size_t>(slot)] - from;
}

std::pair<at::Tensor, at::Tensor> DecodeCacheState::attention_rows(int64_t l, const LayerKV& content,
                                                                   const ops::RopeTables* tables) const {
  const ModelConfig& c = model->config();
  if (latent) {
    // [c_KV ‖ RoPE(k_pe)]: the absorbed form's one key head; [c_KV ‖ k_pe] under dynamic NTK (tables null:
    // k_pe rotated when read, cached_attention_mla.cpp).
    const int64_t M = content.v.size(0);
    at::Tensor k = at::empty({M, 1, dk}, content.v.options());
    k.narrow(2, 0, c.mla.kv_lora_rank).copy_(content.v);
    const at::Tensor pe = k.narrow(2, c.mla.kv_lora_rank, c.mla.qk_rope_head_dim);
    if (tables != nullptr) {
      rotate_into(c.rope, pe, content.k, *tables);
    } else {
      pe.copy_(content.k);
    }
    return {k, at::Tensor()};
  }
  if (c.attention() == AttentionKind::kMla) {
    return mla_keys(c, model->weights().layers[static_cast<std::size_t>(l)], content, tables);
  }
  return {tables != nullptr ? rotate(c.rope, content.k, *tables) : content.k, content.v};
}

ops::RopeTables open_tables(const Model& m, const at::Tensor& positions, int64_t n, RopeTableCache* table) {
  const ModelConfig& c = m.config();
  const at::ScalarType dtype = ops::rope_table_dtype(m.dtype());
  if (table != nullptr && m.device().is_cpu()) {
    if (const auto run = position_run(positions)) {
      if (auto rows = table->gather(c.rope, {*run}, dtype, n)) return *std::move(rows);
    }
  }
  return ops::rope_tables(rope_angles(c.rope, positions.to(m.device()), n), dtype, m.device());
}

}  // namespace detail

DecodeCache::DecodeCache(const Model& model) : state_(std::make_unique<detail::DecodeCacheState>()) {
  detail::DecodeCacheState& s = *state_;
  const ModelConfig& c = model.config();
  s.model = &model;
  s.rotate_at_read = c.rope.scaling == RopeScaling::kDynamicNtk;
  // The latent layout on the CPU, where the absorbed form reads the rows in place (k_pe stored rotated, or
  // under dynamic NTK rotated when read).
  s.latent = c.attention() == AttentionKind::kMla && model.device().is_cpu();
  if (s.latent) {
    s.heads = 1;
    s.dk = c.mla.kv_lora_rank + c.mla.qk_rope_head_dim;
    s.dv = 0;
  } else if (c.attention() == AttentionKind::kMla) {
    s.heads = c.num_heads;
    s.dk = c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim;
    s.dv = c.mla.v_head_dim;
  } else {
    s.heads = c.num_kv_heads;
    s.dk = s.dv = c.head_dim;
  }
  s.keys.resize(static_cast<std::size_t>(c.num_layers));
  s.values.resize(static_cast<std::size_t>(c.num_layers));
}

DecodeCache::~DecodeCache() = default;

const Model& DecodeCache::model() const { return *state_->model; }

int64_t DecodeCache::open(const PastKV* past, bool keep_content) {
  c10::InferenceMode guard;
  detail::DecodeCacheState& s = *state_;
  const Model& m = *s.model;
  const ModelConfig& c = m.config();
  if (past != nullptr && past->cache != nullptr) {
    ORBIT_CHECK(past->cache == this, "DecodeCache::open: the past is a slot of another decode cache");
    const int64_t child = fork(past->cache_slot);
    auto& from = s.kept_from[static_cast<std::size_t>(child)];
    if (keep_content && from < 0) from = s.lengths[static_cast<std::size_t>(child)];
    return child;
  }
  const int64_t n = past != nullptr ? past->length() : 0;
  PastKV gathered;
  if (n > 0) {
    gathered = materialize_past(c, *past, m.device(), m.dtype());
    check_positions(c, gathered.positions, "DecodeCache::open: past.positions");
    ORBIT_CHECK(static_cast<int64_t>(gathered.layers.size()) == c.num_layers,
                "DecodeCache::open: past has " << gathered.layers.size() << " layers, the model has " << c.num_layers);
    for (std::size_t l = 0; l < gathered.layers.size(); ++l) {
      detail::check_content(c, gathered.layers[l], n, "DecodeCache::open: past.layers[" + std::to_string(l) + "]");
    }
  }
  const int64_t slot = s.new_slot();
  s.reserve(s.slots, n);
  if (keep_content) s.kept_from[static_cast<std::size_t>(slot)] = n;
  if (n == 0) return slot;
  const at::Tensor positions = detail::token_major(gathered.positions, c.position_rows(), m.device());
  s.positions.select(0, slot).narrow(0, 0, n).copy_(positions);
  ops::RopeTables tables;
  if (!s.rotate_at_read) tables = detail::open_tables(m, gathered.positions, n, m.rope_table_.get());
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const auto [k, v] =
        s.attention_rows(l, gathered.layers[static_cast<std::size_t>(l)], s.rotate_at_read ? nullptr : &tables);
    s.keys[static_cast<std::size_t>(l)].select(0, slot).narrow(1, 0, n).copy_(k.permute({1, 0, 2}));
    if (!s.latent) s.values[static_cast<std::size_t>(l)].select(0, slot).narrow(1, 0, n).copy_(v.permute({1, 0, 2}));
  }
  s.lengths[static_cast<std::size_t>(slot)] = n;
  return slot;
}

int64_t DecodeCache::fork(int64_t slot) {
  c10::InferenceMode guard;
  detail::DecodeCacheState& s = *state_;
  s.check_open(slot, "DecodeCache::fork");
  const int64_t n = s.lengths[static_cast<std::size_t>(slot)];
  const int64_t child = s.new_slot();  // may grow the buffers: read them after
  for (std::size_t l = 0; l < s.keys.size(); ++l) {
    s.keys[l].select(0, child).narrow(1, 0, n).copy_(s.keys[l].select(0, slot).narrow(1, 0, n));
    if (!s.latent) s.values[l].select(0, child).narrow(1, 0, n).copy_(s.values[l].select(0, slot).narrow(1, 0, n));
  }
  s.positions.select(0, child).narrow(0, 0, n).copy_(s.positions.select(0, slot).narrow(0, 0, n));
  s.lengths[static_cast<std::size_t>(child)] = n;
  s.kept_from[static_cast<std::size_t>(child)] = s.kept_from[static_cast<std::size_t>(slot)];
  const int64_t kept = s.kept_rows(slot);
  for (std::size_t l = 0; l < s.kept_k.size() && kept > 0; ++l) {
    s.kept_k[l].select(0, child).narrow(0, 0, kept).copy_(s.kept_k[l].select(0, slot).narrow(0, 0, kept));
    s.kept_v[l].select(0, child).narrow(0, 0, kept).copy_(s.kept_v[l].select(0, slot).narrow(0, 0, kept));
  }
  return child;
}

void DecodeCache::close(int64_t slot) {
  state_->check_open(slot, "DecodeCache::close");
  c10::InferenceMode guard;
  detail::DecodeCacheState& s = *state_;
  s.burst_slots = std::max(s.burst_slots, slot + 1);
  s.burst_rows = std::max(s.burst_rows, s.lengths[static_cast<std::size_t>(slot)]);
  s.burst_kept = std::max(s.burst_kept, s.kept_rows(slot));
  s.lengths[static_cast<std::size_t>(slot)] = -1;
  s.fit_kept();
  s.fit_main();
}

PastKV DecodeCache::past(int64_t slot) {
  state_->check_open(slot, "DecodeCache::past");
  PastKV p;
  p.cache = this;
  p.cache_slot = slot;
  return p;
}

int64_t DecodeCache::length(int64_t slot) const {
  state_->check_open(slot, "DecodeCache::length");
  return state_->lengths[static_cast<std::size_t>(slot)];
}

int64_t DecodeCache::kept_rows(int64_t slot) const {
  state_->check_open(slot, "DecodeCache::kept_rows");
  return state_->kept_rows(slot);
}

std::vector<LayerKV> DecodeCache::kept(int64_t slot, int64_t from, int64_t count) const {
  const detail::DecodeCacheState& s = *state_;
  s.check_open(slot, "DecodeCache::kept");
  const int64_t rows = s.kept_rows(slot);
  ORBIT_CHECK(from >= 0 && count >= 1 && from + count <= rows,
              "DecodeCache::kept: rows ["
                  << from << ", " << from + count << ") of slot " << slot << ", which keeps " << rows
                  << (s.kept_from[static_cast<std::size_t>(slot)] < 0 ? " (opened without keep_content)" : ""));
  std::vector<LayerKV> out(s.kept_k.size());
  for (std::size_t l = 0; l < out.size(); ++l) {
    out[l] = {s.kept_k[l].select(0, slot).narrow(0, from, count), s.kept_v[l].select(0, slot).narrow(0, from, count)};
  }
  return out;
}

int64_t DecodeCache::open_slots() const {
  return std::count_if(state_->lengths.begin(), state_->lengths.end(), [](int64_t n) { return n >= 0; });
}

bool DecodeCache::latent() const { return state_->latent; }

int64_t DecodeCache::row_bytes() const {
  const detail::DecodeCacheState& s = *state_;
  const int64_t element = c10::elementSize(s.model->dtype());
  return static_cast<int64_t>(s.keys.size()) * s.heads * (s.dk + s.dv) * element;
}

int64_t DecodeCache::bytes() const {
  int64_t total = state_->positions.defined() ? state_->positions.nbytes() : 0;
  for (std::size_t l = 0; l < state_->keys.size(); ++l) {
    if (state_->keys[l].defined()) total += state_->keys[l].nbytes();
    if (state_->values[l].defined()) total += state_->values[l].nbytes();
    if (state_->kept_capacity > 0) total += state_->kept_k[l].nbytes() + state_->kept_v[l].nbytes();
  }
  return total;
}

}  // namespace orbit::runtime
