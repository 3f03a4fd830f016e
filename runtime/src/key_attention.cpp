// ForwardOptions::key_attention (key_attention.h).
#include "key_attention.h"

#include <ATen/ATen.h>

#include "attention.h"
#include "orbit/common/error.h"

namespace orbit::runtime::detail {

namespace {

// The last computed token's query [H, d_k] and sequence s's keys at layer l [H_a, S, d_k] in attention form
// (rotated, a decode cache's rotated when read by its group's read tables under dynamic NTK; MLA's expanded, or
// in the absorbed form and a decode cache's latent layout the query carried into the latent and the one key head
// [c_KV ‖ RoPE(k_pe)]: the same scores), S = its past and input tokens; keys undefined where they are not at hand
// (key_attention.h).
struct LastQueryKeys {
  at::Tensor query, keys;
};

// A cached sequence's keys in a cache whose keys are rotated when read (dynamic NTK): its slot's rows rotated
// by its cached group's read tables, as its attention read them.
at::Tensor cached_member_keys(const BatchPass& b, const SequencePass& s, int64_t l) {
  for (const CachedGroup& g : b.cached) {
    if (g.cache != s.past->cache) continue;
    for (std::size_t j = 0; j < g.members.size(); ++j) {
      if (&b.seqs[g.members[j]] == &s) return read_rotated_keys(b.model.config(), g, l, j, s.past->length + s.tokens);
    }
  }
  throw Error("forward: key_attention found no cached group of a sequence over a decode cache's slot", __FILE__,
              __LINE__);
}

LastQueryKeys attention_keys(const BatchPass& b, const SequencePass& s, const LayerWeights& w, const LayerKV& content,
                             const at::Tensor& last, int64_t l) {
  const ModelConfig& c = b.model.config();
  const ForwardPast& fp = *s.past;
  if (fp.cache != nullptr) {
    const at::Tensor keys =
        fp.cache->rotate_at_read
            ? cached_member_keys(b, s, l)
            : fp.cache->keys[static_cast<std::size_t>(l)].select(0, fp.slot).narrow(1, 0, fp.length + s.tokens);
    // The latent layout's one key head [c_KV ‖ RoPE(k_pe)], met by the query carried into the latent.
    if (fp.cache->latent) return {mla_absorbed_queries(c, w, last.unsqueeze(0)).squeeze(0), keys};
    return {last, keys};
  }
  const LayerKV keys = sequence_keys(b.model, s, content, l);
  if (c.attention() == AttentionKind::kMla && s.mla_absorbed) {
    const MlaAbsorbed a = mla_absorb(c, w, last.unsqueeze(0), keys, s.rope.key);
    return {a.q.squeeze(0), a.k.permute({1, 0, 2})};
  }
  if (c.attention() == AttentionKind::kMla) return {last, mla_keys(c, w, keys, &s.rope.key).first.permute({1, 0, 2})};
  return {last, rotate(c.rope, keys.k, s.rope.key).permute({1, 0, 2})};
}

}  // namespace

void add_key_attention(const BatchPass& b, int64_t l, const LayerWeights& w, const std::vector<LayerKV>& contents,
                       const at::Tensor& q, std::vector<ForwardResult>& results) {
  const ModelConfig& c = b.model.config();
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    const SequencePass& s = b.seqs[i];
    if (!s.options->key_attention || s.rows == 0) continue;
    if (l > 0 && !results[i].key_attention.defined()) continue;  // not at hand at layer 0: never
    const LastQueryKeys qk = attention_keys(b, s, w, contents[i], q.select(0, b.first_row[i] + s.rows - 1), l);
    const at::Tensor& keys = qk.keys;
    if (!keys.defined()) continue;
    // The last computed token sees keys [0, its query index]: every key but after a partial recompute (read
    // from the device only then).
    const int64_t seen =
        s.recompute.partial ? s.query_index[s.rows - 1].item<int64_t>() + 1 : s.past->length + s.tokens;
    const int64_t Ha = keys.size(0), G = c.num_heads / Ha, dk = keys.size(2);
    const at::Tensor last = qk.query.to(at::kFloat).reshape({Ha, G, dk});
    const at::Tensor scores = at::bmm(last, keys.narrow(1, 0, seen).to(at::kFloat).transpose(1, 2));
    const at::Tensor mass = at::softmax(scores.mul_(attention_scale(c)), -1).view({Ha * G, seen}).mean(0);
    if (results[i].key_attention.defined()) {
      results[i].key_attention.add_(mass);
    } else {
      results[i].key_attention = mass;
    }
  }
}

void finish_key_attention(const BatchPass& b, std::vector<ForwardResult>& results) {
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    at::Tensor& mass = results[i].key_attention;
    if (mass.defined()) mass = mass.div(static_cast<double>(b.seqs[i].num_layers)).to(at::kCPU);
  }
}

}  // namespace orbit::runtime::detail
