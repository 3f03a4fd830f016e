// One sequence of a forward, prepared before the first layer (forward_sequence.h).
#include "forward_sequence.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attention.h"
#include "decode_cache_state.h"
#include "orbit/common/error.h"
#include "orbit/runtime/index_range.h"
#include "orbit/runtime/paged_past.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/weights.h"
#include "rope_table.h"

namespace orbit::runtime::detail {

// Checks one layer's content tensors against the config's content shapes with `rows` tokens.
void check_content(const ModelConfig& c, const LayerKV& kv, int64_t rows, const std::string& what) {
  const ContentShape ks = c.content_k_shape(), vs = c.content_v_shape();
  const std::vector<int64_t> k_expected{rows, ks.heads, ks.dim}, v_expected{rows, vs.heads, vs.dim};
  ORBIT_CHECK(kv.k.defined() && kv.k.sizes() == at::IntArrayRef(k_expected) && kv.v.defined() &&
                  kv.v.sizes() == at::IntArrayRef(v_expected),
              what << " k/v must be " << shape_string(k_expected) << " / " << shape_string(v_expected)
                   << " (content form of " << arch_name(c.arch) << "), got "
                   << (kv.k.defined() ? shape_string(kv.k.sizes()) : "undefined") << " / "
                   << (kv.v.defined() ? shape_string(kv.v.sizes()) : "undefined"));
}

// Input positions as given or defaulted, shape-checked against T tokens.
at::Tensor input_positions(const ModelConfig& c, const at::Tensor& given, int64_t past_len, int64_t T) {
  if (!given.defined()) return index_range(past_len, T);
  if (c.rope.is_mrope() && given.dim() == 2) {
    ORBIT_CHECK(given.size(0) == 3, "forward: input.positions: a position grid must have 3 rows (t, h, w), got "
                                        << shape_string(given.sizes()));
    ORBIT_CHECK(given.size(1) == T,
                "forward: input.positions: position grid has " << given.size(1) << " columns for " << T << " tokens");
  } else {
    ORBIT_CHECK(given.dim() == 1 && given.size(0) == T,
                "forward: input.positions must be [T=" << T << "]" << (c.rope.is_mrope() ? " or [3, T]" : "")
                                                       << ", got " << shape_string(given.sizes()));
  }
  return given;
}

// Why the paged kernel cannot run this model or input ("" when it can).
std::string paged_kernel_gap(const ModelConfig& c, const c10::Device& device, int64_t queries, bool partial) {
  if (!device.is_cuda()) return "the model runs on CPU";
  if (c.attention() == AttentionKind::kMla) return "MLA has no paged kernel";
  if (c.rope.rotary_dim != c.head_dim) return "partial rotary has no paged kernel";
  if (!ops::paged_attention_available(device, c.num_heads, c.num_kv_heads, c.head_dim)) {
    return "the paged kernel covers head_dim 64/128 with H/H_kv <= 8 (or this build has no CUDA kernels)";
  }
  if (partial) return "partial recompute reads contiguous keys";
  if (queries > kPagedMaxQueries) return "prefill-sized input (> " + std::to_string(kPagedMaxQueries) + " tokens)";
  return "";
}

at::Tensor token_major(const at::Tensor& positions, int64_t rows, const c10::Device& device) {
  at::Tensor p = positions.to(device, at::kLong);
  p = p.dim() == 1 ? p.unsqueeze(1).expand({p.size(0), rows}) : p.t();
  return p.contiguous();
}

namespace {

// Layer factors fk, fv of a patch placed at rows [first, first + length) as the paged kernel reads them.
// Factors already in place (contiguous on the device, all four of the pages' 16-bit type `dtype`, or all
// float32) are read where they are: the PagedPast's patches outlive the forward. Others are moved once, as
// float32, into `keep_alive`.
kernels::cpu::PatchSegment patch_segment(int64_t first, int64_t length, const LowRank& fk, const LowRank& fv,
                                         const c10::Device& device, c10::ScalarType dtype,
                                         std::vector<at::Tensor>* keep_alive) {
  const auto in_place = [&](const at::Tensor& x, c10::ScalarType t) {
    return x.device() == device && x.scalar_type() == t && x.is_contiguous();
  };
  const auto pair_in_place = [&](const LowRank& f, c10::ScalarType t) {
    return f.rank() == 0 || (in_place(f.u, t) && in_place(f.vt, t));
  };
  kernels::cpu::PatchSegment seg;
  seg.first = first;
  seg.length = length;
  const bool half = dtype == at::kBFloat16 || dtype == at::kHalf;
  seg.factors_as_pages = half && pair_in_place(fk, dtype) && pair_in_place(fv, dtype);
  const c10::ScalarType type = seg.factors_as_pages ? dtype : at::kFloat;
  const auto place = [&](const at::Tensor& x) -> const void* {
    if (in_place(x, type)) return x.data_ptr();
    keep_alive->push_back(x.to(device, type).contiguous());
    return keep_alive->back().data_ptr();
  };
  seg.rank_k = fk.rank();
  seg.rank_v = fv.rank();
  if (seg.rank_k > 0) seg.u_k = place(fk.u), seg.vt_k = place(fk.vt);
  if (seg.rank_v > 0) seg.u_v = place(fv.u), seg.vt_v = place(fv.vt);
  return seg;
}

}  // namespace

PagedPlan plan_paged(const ModelConfig& c, const PastKV& past, const at::Tensor& input_positions, int64_t window_len,
                     const c10::Device& device, c10::ScalarType dtype) {
  const PagedPast& paged = *past.paged;
  ORBIT_CHECK(paged.pool != nullptr, "forward: the paged past has no pool");
  const KVPool& pool = *paged.pool;
  ORBIT_CHECK(pool.device() == device && pool.options().dtype == dtype,
              "forward: the paged past's pool is " << dtype_name(pool.options().dtype) << " on "
                                                   << device_name(pool.device()) << ", the model " << dtype_name(dtype)
                                                   << " on " << device_name(device));
  ORBIT_CHECK(pool.options().num_layers == c.num_layers && pool.num_kinds() == 2 &&
                  pool.options().widths[0] == c.content_k_shape().width() &&
                  pool.options().widths[1] == c.content_v_shape().width(),
              "forward: the paged past's pool does not hold this model's content channel");
  PagedPlan plan;
  plan.pool = &pool;
  plan.rows = pool.num_pages() * pool.page_size();
  const int64_t n = paged.length();
  const at::Tensor slots = paged.slots.to(at::kCPU, at::kLong);
  if (n > 0) {
    ORBIT_CHECK(slots.min().item<int64_t>() >= 0 && slots.max().item<int64_t>() < plan.rows,
                "forward: a paged past slot lies outside the pool's " << plan.rows << " rows");
  }
  ops::PagedAttentionInputs& b = plan.base;
  b.slots = slots.to(at::kInt).to(device);
  const int64_t rows = c.position_rows();
  b.positions = at::cat({token_major(past.positions, rows, device), token_major(input_positions, rows, device)}, 0);
  b.inv_freq = rope_inv_freq(c.rope, window_len).to(device);
  if (c.rope.is_mrope()) {
    std::vector<int8_t> row_of;
    for (int64_t r = 0; r < 3; ++r)
      row_of.insert(row_of.end(), static_cast<size_t>(c.rope.mrope_section[r]), static_cast<int8_t>(r));
    b.row_of_freq = at::tensor(at::ArrayRef<int8_t>(row_of), at::kChar).to(device);
  }
  b.interleaved = c.rope.layout == RopeLayout::kInterleaved;
  if (!paged.patches.empty()) {
    at::Tensor patch_of = at::full({n}, -1, at::kInt);
    std::vector<std::vector<kernels::cpu::PatchSegment>> per_layer(static_cast<size_t>(c.num_layers));
    int32_t index = 0;
    check_placed_patches(c, paged, "forward");
    for (const PlacedPatch& placed : paged.patches) {
      const Patch& p = *placed.patch;
      patch_of.narrow(0, placed.first, p.length).fill_(index++);
      for (int64_t l = 0; l < c.num_layers; ++l) {
        per_layer[static_cast<size_t>(l)].push_back(patch_segment(placed.first, p.length, p.k[static_cast<size_t>(l)],
                                                                  p.v[static_cast<size_t>(l)], device, dtype,
                                                                  &plan.keep_alive));
      }
    }
    b.patch_of = patch_of.to(device);
    // One upload for every layer's table; layer l's is a slice of it.
    std::vector<kernels::cpu::PatchSegment> all;
    for (const auto& segs : per_layer) all.insert(all.end(), segs.begin(), segs.end());
    const at::Tensor table = ops::make_segment_table(all, device);
    const int64_t layer_bytes = static_cast<int64_t>(paged.patches.size() * sizeof(kernels::cpu::PatchSegment));
    for (int64_t l = 0; l < c.num_layers; ++l)
      plan.segment_tables.push_back(table.narrow(0, l * layer_bytes, layer_bytes));
  }
  return plan;
}

int64_t input_length(const Model& m, const ForwardInput& input) {
  const bool has_tokens = !input.tokens.empty();
  const bool has_embeddings = input.embeddings.defined();
  ORBIT_CHECK(has_tokens != has_embeddings, "forward: give exactly one of input.tokens and input.embeddings");
  if (has_tokens) {
    const int64_t vocab = m.config().vocab_size;
    for (std::size_t i = 0; i < input.tokens.size(); ++i) {
      ORBIT_CHECK(input.tokens[i] >= 0 && input.tokens[i] < vocab,
                  "tokens[" << i << "] = " << input.tokens[i] << " is outside the vocabulary [0, " << vocab << ")");
    }
    return static_cast<int64_t>(input.tokens.size());
  }
  const int64_t hidden_size = m.config().hidden_size;
  ORBIT_CHECK(input.embeddings.dim() == 2 && input.embeddings.size(1) == hidden_size,
              "forward: input.embeddings must be [T, hidden_size=" << hidden_size << "], got "
                                                                   << shape_string(input.embeddings.sizes()));
  ORBIT_CHECK(at::isFloatingType(input.embeddings.scalar_type()),
              "forward: input.embeddings must be floating point, got " << input.embeddings.scalar_type());
  return input.embeddings.size(0);
}

// The forward's input as hidden states [T, hidden] on the model's device and dtype.
at::Tensor input_hidden(const Model& m, const ForwardInput& input) {
  input_length(m, input);
  if (!input.tokens.empty()) return m.embed(input.tokens);
  return input.embeddings.to(m.device(), m.dtype()).contiguous();
}

ForwardPast::ForwardPast(const Model& m, const PastKV* given, int64_t T, const ForwardOptions& options) : past(given) {
  const ModelConfig& c = m.config();
  if (given != nullptr && given->cache != nullptr) {
    cache = &DecodeCacheState::of(*given->cache);
    slot = given->cache_slot;
    cache->check_open(slot, "forward: past");
    ORBIT_CHECK(cache->model == &m, "forward: the past is a slot of another model's decode cache");
    past = nullptr;
    length = cache->lengths[static_cast<std::size_t>(slot)];
    return;
  }
  if (given != nullptr && given->paged) {
    // key_attention reads the past's keys in attention form, which the kernel never makes: gathered then.
    if (paged_kernel_gap(c, m.device(), T, options.recompute.defined()).empty() && !options.key_attention) {
      paged = given;
    } else {
      // Gathering reads every layer now, so every layer's wait comes first.
      if (options.before_layer) {
        for (int64_t l = 0; l < c.num_layers; ++l) options.before_layer(l);
      }
      gathered = materialize_past(c, *given, m.device(), m.dtype());
      past = &gathered;
      announced = true;
    }
  }
  length = past ? past->length() : 0;
  paged_length = paged ? paged->paged->length() : 0;
}

// Checks the past's layers (the tokens after the paged ones) and positions against the config.
void check_past(const ModelConfig& c, const ForwardPast& fp) {
  if (!fp.past) return;
  const PastKV* past = fp.past;
  const bool no_extra = fp.paged != nullptr && past->layers.empty();
  ORBIT_CHECK(no_extra || static_cast<int64_t>(past->layers.size()) == c.num_layers,
              "forward: past has " << past->layers.size() << " layers, the model has " << c.num_layers);
  ORBIT_CHECK(!no_extra || fp.length == fp.paged_length, "forward: past.positions cover " << fp.length << " tokens but "
                                                                                          << fp.paged_length
                                                                                          << " are paged and no "
                                                                                             "layers follow");
  if (fp.length > 0) check_positions(c, past->positions, "forward: past.positions");
  for (std::size_t l = 0; l < past->layers.size() && fp.length > fp.paged_length; ++l) {
    check_content(c, past->layers[l], fp.length - fp.paged_length, "forward: past.layers[" + std::to_string(l) + "]");
  }
}

// The selection for T input tokens, options.recompute and options.cached (for `num_layers` layers) checked.
Recompute select_recomputed(const Model& m, const ForwardOptions& options, int64_t T, int64_t num_layers) {
  Recompute rc;
  rc.partial = options.recompute.defined();
  if (!rc.partial) return rc;
  const at::Tensor& selected = options.recompute;
  ORBIT_CHECK(selected.dim() == 1 && selected.scalar_type() == at::kLong,
              "forward: options.recompute must be a 1-D int64 tensor of input indices");
  if (selected.numel() > 0) {
    ORBIT_CHECK(selected.min().item<int64_t>() >= 0 && selected.max().item<int64_t>() < T,
                "forward: options.recompute holds an index outside the input [0, " << T << ")");
    ORBIT_CHECK(selected.numel() == 1 || (selected.slice(0, 1) > selected.slice(0, 0, -1)).all().item<bool>(),
                "forward: options.recompute must be strictly ascending");
  }
  ORBIT_CHECK(static_cast<int64_t>(options.cached.size()) >= num_layers,
              "forward: options.cached has " << options.cached.size() << " layers, " << num_layers << " are run");
  for (int64_t l = 0; l < num_layers; ++l) {
    check_content(m.config(), options.cached[static_cast<std::size_t>(l)], T,
                  "forward: options.cached[" + std::to_string(l) + "]");
  }
  rc.selected = selected.to(m.device());
  return rc;
}

// One angle function for the input and the (relocated) past's keys; M-RoPE grids and 1-D positions alike.
ops::RopeTables key_rope(const Model& m, const ForwardPast& fp, const at::Tensor& positions, int64_t window_len,
                         RopeTableCache* table) {
  // A paged past's kernel rotates its keys in place; a decode cache holds them rotated (or rotates at read).
  if (fp.paged != nullptr || fp.cache != nullptr) return {};
  const ModelConfig& c = m.config();
  const at::ScalarType dtype = ops::rope_table_dtype(m.dtype());
  if (table != nullptr && m.device().is_cpu()) {
    const auto input = position_run(positions);
    const auto past = fp.length > 0 ? position_run(fp.past->positions) : input;
    if (input && past) {
      std::vector<RopeTableCache::Run> runs{*input};
      if (fp.length > 0) runs.insert(runs.begin(), *past);
      if (auto rows = table->gather(c.rope, runs, dtype, window_len)) return *std::move(rows);
    }
  }
  const at::Tensor angles = rope_angles(c.rope, positions.to(m.device()), window_len);
  const at::Tensor key_angles =
      fp.length > 0 ? at::cat({rope_angles(c.rope, fp.past->positions.to(m.device()), window_len), angles}, 0) : angles;
  return ops::rope_tables(key_angles, dtype, m.device());
}

at::Tensor computed_positions(const at::Tensor& positions, const Recompute& rc) {
  return rc.partial ? positions.index_select(-1, rc.selected.to(positions.device())) : positions;
}

// The paged kernel's inputs for layer l: the forward's, with the pool's layer-l pages and patch segments.
ops::PagedAttentionInputs paged_layer(const PagedPlan& plan, int64_t l) {
  ops::PagedAttentionInputs layer = plan.base;
  const at::Tensor& ks = plan.pool->storage(0);
  const at::Tensor& vs = plan.pool->storage(1);
  layer.k_pages = ks.select(0, l).view({plan.rows, ks.size(3)});
  layer.v_pages = vs.select(0, l).view({plan.rows, vs.size(3)});
  if (!plan.segment_tables.empty()) layer.segments = plan.segment_tables[static_cast<std::size_t>(l)];
  return layer;
}

bool mla_form_absorbed(const Model& m, const ForwardOptions& options, const ForwardPast& fp, int64_t R, int64_t S) {
  const ModelConfig& c = m.config();
  if (c.attention() != AttentionKind::kMla) {
    ORBIT_CHECK(options.mla_form == MlaForm::kAuto,
                "forward: options.mla_form (naive or absorbed) is for MLA models only; this model's attention is "
                "GQA/MHA (leave it kAuto)");
    return false;
  }
  if (fp.cache != nullptr) {
    // A decode cache's slots fix the form: its latent rows are read absorbed, its expanded ones naive.
    ORBIT_CHECK(options.mla_form != MlaForm::kNaive || !fp.cache->latent,
                "forward: options.mla_form = naive over a decode cache's past is not supported (its slots hold "
                "the latent, read in the absorbed form); give a contiguous or paged past, or use kAuto or kAbsorbed");
    ORBIT_CHECK(options.mla_form != MlaForm::kAbsorbed || fp.cache->latent,
                "forward: options.mla_form = absorbed over this decode cache's past is not supported (its slots hold "
                "expanded keys: "
                    << device_name(m.device()) << "); give a contiguous or paged past, or use kAuto or kNaive");
    return fp.cache->latent;
  }
  if (options.mla_form == MlaForm::kAbsorbed) {
    ORBIT_CHECK(m.device().is_cpu(), "forward: options.mla_form = absorbed runs on the CPU only (this model is on "
                                         << device_name(m.device()) << "); use kAuto or kNaive");
    return true;
  }
  if (options.mla_form == MlaForm::kNaive) return false;
  return m.device().is_cpu() && mla_absorbed_cheaper(c.mla, R, S);
}

SequencePass prepare_sequence(const Model& m, const SequenceForward& s, RopeTableCache* table) {
  static const ForwardOptions kDefaults;
  ORBIT_CHECK(s.input != nullptr, "forward: no input given");
  const ForwardOptions& options = s.options != nullptr ? *s.options : kDefaults;
  const ModelConfig& c = m.config();
  SequencePass p;
  p.options = &options;
  // Tokens all computed are embedded by the batch, in one lookup for every sequence.
  const bool embed_here = s.input->embeddings.defined() || options.recompute.defined();
  const int64_t T = input_length(m, *s.input);
  at::Tensor x = embed_here ? input_hidden(m, *s.input) : at::Tensor();
  ORBIT_CHECK(T > 0, "forward: empty input");
  p.past = std::make_unique<ForwardPast>(m, s.past, T, options);
  const ForwardPast& fp = *p.past;
  check_past(c, fp);

  const at::Tensor positions = input_positions(c, s.input->positions, fp.length, T);
  check_positions(c, positions, "forward: input.positions");
  p.num_layers = options.max_layers > 0 ? std::min(options.max_layers, c.num_layers) : c.num_layers;
  ORBIT_CHECK(options.max_layers >= 0, "forward: options.max_layers must be >= 0, got " << options.max_layers);
  ORBIT_CHECK(p.num_layers == c.num_layers || options.logits == LogitsMode::kNone,
              "forward: logits need every layer; use LogitsMode::kNone with options.max_layers");

  // Partial recompute: x holds only the recomputed tokens; the others come from options.cached.
  ORBIT_CHECK(fp.cache == nullptr || p.num_layers == c.num_layers,
              "forward: options.max_layers over a decode cache's past is not supported (its slot needs every layer)");
  ORBIT_CHECK(fp.cache == nullptr || !options.recompute.defined(),
              "forward: partial recompute over a decode cache's past is not supported (give a contiguous or paged "
              "past)");
  p.recompute = select_recomputed(m, options, T, p.num_layers);
  if (p.recompute.partial) x = x.index_select(0, p.recompute.selected);
  p.tokens = T;
  p.rows = x.defined() ? x.size(0) : T;
  ORBIT_CHECK(p.rows > 0 || options.logits == LogitsMode::kNone,
              "forward: logits asked for but no token is recomputed");
  // A cached group reads its slots' lengths instead (cached_attention.cpp): no index tensor per step.
  if (fp.cache == nullptr) {
    p.query_index = p.recompute.partial ? p.recompute.selected + fp.length : index_range(fp.length, T, m.device());
  }

  const int64_t window_len = options.rope_window_len > 0 ? options.rope_window_len : fp.length + T;
  p.rope.key = key_rope(m, fp, positions, window_len, table);
  p.positions = positions;
  p.window_len = window_len;
  if (fp.paged != nullptr) {
    p.paged = std::make_unique<PagedPlan>(plan_paged(c, *fp.paged, positions, window_len, m.device(), m.dtype()));
  }
  p.mla_absorbed = mla_form_absorbed(m, options, fp, p.rows, fp.length + T);
  p.x = std::move(x);
  return p;
}

LayerKV sequence_keys(const Model& m, const SequencePass& s, const LayerKV& content, int64_t l) {
  const ForwardPast& fp = *s.past;
  if (fp.length <= fp.paged_length) return content;
  const LayerKV& p = fp.past->layers[static_cast<std::size_t>(l)];
  return {at::cat({p.k.to(m.device(), m.dtype()), content.k}, 0),
          at::cat({p.v.to(m.device(), m.dtype()), content.v}, 0)};
}

}  // namespace orbit::runtime::detail
