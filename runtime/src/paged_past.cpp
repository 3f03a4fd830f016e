#include "orbit/runtime/paged_past.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <string>
#include <utility>

#include "orbit/common/error.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

PastKV make_paged_past(std::shared_ptr<const PagedPast> paged, at::Tensor positions, std::vector<LayerKV> extra) {
  ORBIT_CHECK(paged != nullptr && paged->pool != nullptr, "make_paged_past: no paged past (or no pool) given");
  ORBIT_CHECK(positions.defined() && positions.size(-1) >= paged->length(),
              "make_paged_past: positions cover " << (positions.defined() ? positions.size(-1) : 0)
                                                  << " tokens, fewer than the " << paged->length() << " paged ones");
  PastKV past;
  past.paged = std::move(paged);
  past.positions = std::move(positions);
  past.layers = std::move(extra);
  return past;
}

void check_placed_patches(const ModelConfig& c, const PagedPast& paged, const std::string& what) {
  const int64_t n = paged.length();
  for (const PlacedPatch& placed : paged.patches) {
    ORBIT_CHECK(placed.patch != nullptr, what << ": a placed patch is null");
    const Patch& p = *placed.patch;
    ORBIT_CHECK(placed.first >= 0 && placed.first + p.length <= n,
                what << ": patch rows [" << placed.first << ", " << placed.first + p.length << ") lie outside the " << n
                     << " paged tokens");
    ORBIT_CHECK(static_cast<int64_t>(p.k.size()) == c.num_layers && static_cast<int64_t>(p.v.size()) == c.num_layers,
                what << ": a placed patch has " << p.k.size() << " layers, the model " << c.num_layers);
  }
}

std::vector<LayerKV> materialize(const ModelConfig& c, const PagedPast& paged, const c10::Device& device,
                                 c10::ScalarType dtype) {
  c10::InferenceMode guard;
  ORBIT_CHECK(paged.pool != nullptr, "materialize: the paged past has no pool");
  const KVPool& pool = *paged.pool;
  const ContentShape ks = c.content_k_shape(), vs = c.content_v_shape();
  ORBIT_CHECK(pool.options().num_layers == c.num_layers && pool.num_kinds() == 2 &&
                  pool.options().widths[0] == ks.width() && pool.options().widths[1] == vs.width(),
              "paged past: the pool's layers/widths (" << pool.options().num_layers << ", "
                                                       << at::IntArrayRef(pool.options().widths)
                                                       << ") do not match the model's content channel");
  const int64_t n = paged.length();
  const int64_t rows = pool.num_pages() * pool.page_size();
  // Checked where the slots are (on the host as a rule: no device sync), then moved to the pool.
  if (n > 0) {
    ORBIT_CHECK(
        paged.slots.dim() == 1 && paged.slots.min().item<int64_t>() >= 0 && paged.slots.max().item<int64_t>() < rows,
        "paged past: a slot lies outside the pool's " << rows << " rows");
  }
  const at::Tensor slots = paged.slots.to(pool.device(), at::kLong);
  check_placed_patches(c, paged, "paged past");
  std::vector<LayerKV> out(static_cast<size_t>(c.num_layers));
  for (int64_t kind = 0; kind < 2; ++kind) {
    const at::Tensor& storage = pool.storage(kind);
    // Every layer's rows in one gather: [L, n, W] on the model's device in its dtype.
    at::Tensor all = storage.view({c.num_layers, rows, storage.size(3)}).index_select(1, slots).to(device, dtype);
    const ContentShape shape = kind == 0 ? ks : vs;
    for (const PlacedPatch& placed : paged.patches) {
      const Patch& p = *placed.patch;
      const std::vector<LowRank>& factors = kind == 0 ? p.k : p.v;
      for (int64_t l = 0; l < c.num_layers; ++l) {
        const LowRank& f = factors[static_cast<size_t>(l)];
        ORBIT_CHECK(f.rank() == 0 || f.vt.size(1) == shape.width(), "paged past: layer "
                                                                        << l << " patch width " << f.vt.size(1)
                                                                        << " != content width " << shape.width());
      }
      const at::Tensor rows_of = all.narrow(1, placed.first, p.length);  // [L, len, W]
      const at::ScalarType sum_type = at::promote_types(dtype, at::kFloat);
      // One batched GEMM over the layers where they all carry factors of one rank (a patch of every
      // layer, as formed by default); otherwise layer by layer. Float32 factors; the sum is taken in
      // float32 (float64 for a float64 window) and rounded once to the window's dtype.
      const int64_t r0 = factors.front().rank();
      bool uniform = r0 > 0;
      for (const LowRank& f : factors) uniform = uniform && f.rank() == r0;
      if (uniform) {
        std::vector<at::Tensor> us, vts;
        for (const LowRank& f : factors) {
          us.push_back(f.u.to(device, at::kFloat));
          vts.push_back(f.vt.to(device, at::kFloat));
        }
        const at::Tensor delta = at::bmm(at::stack(us), at::stack(vts));  // [L, len, W] float32
        rows_of.copy_(rows_of.to(sum_type).add_(delta));
        continue;
      }
      for (int64_t l = 0; l < c.num_layers; ++l) {
        const LowRank& f = factors[static_cast<size_t>(l)];
        if (f.rank() == 0) continue;
        const at::Tensor delta = at::mm(f.u.to(device, at::kFloat), f.vt.to(device, at::kFloat));
        at::Tensor row = rows_of.select(0, l);
        row.copy_(row.to(sum_type).add_(delta));
      }
    }
    for (int64_t l = 0; l < c.num_layers; ++l) {
      at::Tensor view = all.select(0, l).view({n, shape.heads, shape.dim});
      (kind == 0 ? out[static_cast<size_t>(l)].k : out[static_cast<size_t>(l)].v) = view;
    }
  }
  return out;
}

PastKV materialize_past(const ModelConfig& c, const PastKV& past, const c10::Device& device, c10::ScalarType dtype) {
  if (!past.paged) return past;
  std::vector<LayerKV> layers = materialize(c, *past.paged, device, dtype);
  if (!past.layers.empty()) {
    ORBIT_CHECK(past.layers.size() == layers.size(),
                "paged past: " << past.layers.size() << " extra layers, the model has " << layers.size());
    for (size_t l = 0; l < layers.size(); ++l) {
      layers[l].k = at::cat({layers[l].k, past.layers[l].k.to(device, dtype)}, 0);
      layers[l].v = at::cat({layers[l].v, past.layers[l].v.to(device, dtype)}, 0);
    }
  }
  PastKV out;
  out.layers = std::move(layers);
  out.positions = past.positions;
  return out;
}

}  // namespace orbit::runtime
