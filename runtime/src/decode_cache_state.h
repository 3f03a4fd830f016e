// Internal to the runtime: a DecodeCache's buffers (decode_cache.h) and the attention of a forward's sequences
// over them (cached_attention.cpp, driven by forward_batch.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "ops/rope_op.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/model.h"

namespace orbit::runtime::detail {

struct DecodeCacheState {
  const Model* model = nullptr;
  bool rotate_at_read = false;  // dynamic-NTK RoPE: keys stored before rotation, rotated when read
  // MLA in the latent layout (decode_cache.h): keys[l] holds [c_KV ‖ RoPE(k_pe)] per token (heads 1, dk
  // r_kv + d_rope; with rotate_at_read [c_KV ‖ k_pe], k_pe rotated when read), values[l] stays undefined (the
  // value is the key's first r_kv), and the members attend in the absorbed form (cached_attention_mla.cpp).
  // Else (off the CPU) MLA's rows are expanded per head.
  bool latent = false;
  int64_t heads = 0;                     // H_a: heads of the attention-form rows
  int64_t dk = 0, dv = 0;                // their widths (latent: dv 0)
  int64_t slots = 0, capacity = 0;       // the buffers' sizes
  std::vector<at::Tensor> keys, values;  // per layer [slots, heads, capacity, d] (latent: values undefined)
  at::Tensor positions;                  // int64 [slots, capacity, position rows] on the model's device
  std::vector<int64_t> lengths;          // per slot: rows held; -1: free
  // Kept content (DecodeCache::open's keep_content): per layer [slots, kept_capacity, heads, dim] in content
  // form (model.h); row r of slot s is the content of the slot's row kept_from[s] + r.
  std::vector<at::Tensor> kept_k, kept_v;
  int64_t kept_capacity = 0;
  std::vector<int64_t> kept_from;  // per slot: its first kept row; -1: keeps none
  // What the slots closed since the cache was last empty needed: the most slots (last index + 1), rows, and
  // rows kept (kept_rows) by one slot.
  int64_t burst_slots = 0, burst_rows = 0, burst_kept = 0;

  static DecodeCacheState& of(DecodeCache& cache) { return *cache.state_; }

  int64_t new_slot();
  // Grows the buffers (doubling) to hold at least `slots_needed` slots of `capacity_needed` rows.
  void reserve(int64_t slots_needed, int64_t capacity_needed);
  // Grows the kept content's buffers (doubling) to hold `rows_needed` rows of every slot the buffers have.
  void reserve_kept(int64_t rows_needed);
  // After a slot closes: the kept buffers' rows fitted by the main buffers' rule (fit_main). While an open
  // slot keeps rows, shrunk to twice the longest kept once that is at most a quarter of their rows (so one
  // long answer does not hold its memory for every later one). When no open slot keeps a row, kept for the
  // next keeping slot if the slots closed since the cache was last empty kept at least a quarter of their
  // rows (burst_kept), else released. Their slots follow the main buffers' (fit_main releases both).
  void fit_kept();
  void release_kept();
  // After a slot closes (and fit_kept): the main buffers (keys, values, positions, and the kept buffers'
  // slots) fitted. While a slot is open, each dimension is shrunk to twice what the open slots use once that
  // is at most a quarter of it: slots to twice the last open slot's index + 1 (slot numbers stay; the free
  // slots after the last open one go), rows to twice the longest open slot's. Growth doubles and a shrink
  // leaves half free, so a batch that keeps its size does not reallocate at every close. When the last slot
  // closes, the buffers are kept (for the next burst of slots, which then does not grow them again) if the
  // burst that ended (the slots closed since the cache was last empty) needed at least a quarter of them in
  // both dimensions (burst_slots, burst_rows), and released otherwise: an idle cache holds at most about
  // four times what its last burst used, and a small burst after a large one gives the large buffers back.
  // The kept buffers, which fit_kept may have kept, go with released main buffers (their slots are the main
  // buffers'), so an idle cache's kept rows are at most about four times the most one slot of its last burst
  // kept, over the same slots.
  void fit_main();
  void check_open(int64_t slot, const char* what) const;
  // Rows of `slot` kept (content form) from kept_from on; 0 when it keeps none.
  int64_t kept_rows(int64_t slot) const;
  // Layer l's rows in attention form, [M, heads, dk] and [M, heads, dv], of M tokens whose content (model.h)
  // is `content`: keys rotated by `tables` (null: not rotated, rotate_at_read), MLA's expanded from the latent;
  // in the latent layout [M, 1, r_kv + d_rope] = [c_KV ‖ RoPE(k_pe)] (null tables: [c_KV ‖ k_pe]) and no
  // values (undefined).
  std::pair<at::Tensor, at::Tensor> attention_rows(int64_t l, const LayerKV& content,
                                                   const ops::RopeTables* tables) const;
};

class RopeTableCache;  // rope_table.h

// The key tables of a past of n rows that DecodeCache::open writes into a slot rotated (every scaling but
// dynamic NTK, whose keys are rotated when read), at window length n: `positions` ([n], or a grid [rows, n])
// gathered from the model's table (rope_table.h; bit for bit the computed ones) on the CPU where they are a
// 1-D int64 contiguous tensor and the table applies, else computed (rope_angles). table may be null.
ops::RopeTables open_tables(const Model& m, const at::Tensor& positions, int64_t n, RopeTableCache* table);

// Dynamic NTK's read tables (keys rotated when read; cached_attention.cpp): cos/sin of rows [0, keys) of the
// slots [lo, lo + windows.size()) of `s`, slot lo + i at RoPE window length windows[i] (-1: a slot not read,
// turned by zero angles), [windows.size() · keys, rotary_dim/2]. table_read_tables gathers them from the
// model's table (rope_table.h; bit for bit the computed ones) where it applies to every window, on the CPU
// with 1-D positions, else gives nullopt; read_tables computes them where it does not (table may be null).
std::optional<ops::RopeTables> table_read_tables(const Model& m, const DecodeCacheState& s, int64_t lo, int64_t keys,
                                                 const std::vector<int64_t>& windows, RopeTableCache* table);
ops::RopeTables read_tables(const Model& m, const DecodeCacheState& s, int64_t lo, int64_t keys,
                            const std::vector<int64_t>& windows, RopeTableCache* table);

}  // namespace orbit::runtime::detail
