// bench_fidelity_features: what predicts the next-token loss of a window instance served approximately?
// The measurements behind the planner's fidelity model (planner/fidelity_model.h): its sensitivity factor
// and the limits of its keep feature. Not a test; one JSON object per measurement, summarised by
// bench/fidelity/fit_features.py.
//
//   bench_fidelity_features --model PATH [--tokenizer PATH] [--traces FILE,...] [--seeds 8] [--out PATH]
//
// Per seed and kind of content (uniform random ids; text sampled from the model; and for each trace the
// trace's own texts: its first turn as the system prompt P, its chunks as documents, its probe as the
// query), a window [P, D0 .. D4] is prefilled exactly, then:
//   blind  each document's canonical in place of its KV (one at a time): KL, recency weight w, the
//          document's sensitivity s = ‖Δ‖²/‖KV‖² (runtime::deficit_share), its context KL ckl (the mean
//          KL between its own rows' next-token distributions in the window and alone) and the attention
//          mass the query gives it;
//   keep   each of D0..D3 evicted in turn, and each survivor after it kept as-is while the others are
//          prefilled again: KL, the planner's keep feature f = keep_change(removed, gap) and w, s, ckl, the
//          survivor's true KV change (relative, all rows), the change of its first 1/4/8 rows, and the
//          attention mass the query's rows give it (mean over layers and heads, from a forward written out
//          here and checked against the runtime's logits);
//   keep_all  every survivor kept at once: KL and the default model's predicted sum.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "orbit/common/error.h"
#include "orbit/planner/fidelity_model.h"
#include "orbit/runtime/fidelity.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/reuse.h"
#include "orbit/runtime/tokenizer.h"

namespace rt = orbit::runtime;
namespace planner = orbit::planner;
using nlohmann::json;
using Tokens = std::vector<int64_t>;

namespace {

struct Piece {
  rt::Content kv;
  int64_t len = 0;
};

class Lab {
 public:
  explicit Lab(const rt::Model& m) : m_(m) {}

  rt::PastKV past(const std::vector<Piece>& ps) const {
    rt::PastKV p;
    const int64_t layers = m_.config().num_layers;
    p.layers.resize(static_cast<std::size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
      std::vector<at::Tensor> ks, vs;
      for (const Piece& x : ps) {
        ks.push_back(x.kv[static_cast<std::size_t>(l)].k);
        vs.push_back(x.kv[static_cast<std::size_t>(l)].v);
      }
      p.layers[static_cast<std::size_t>(l)] = {at::cat(ks, 0), at::cat(vs, 0)};
    }
    p.positions = at::arange(0, tokens_of(ps), at::kLong);
    return p;
  }
  static int64_t tokens_of(const std::vector<Piece>& ps) {
    int64_t n = 0;
    for (const Piece& x : ps) n += x.len;
    return n;
  }
  static rt::ForwardInput input(const Tokens& t, int64_t start) {
    rt::ForwardInput in;
    in.tokens = t;
    in.positions = at::arange(start, start + static_cast<int64_t>(t.size()), at::kLong);
    return in;
  }
  // `t` prefilled after `ps` (exact in context).
  Piece prefill(const Tokens& t, const std::vector<Piece>& ps) const {
    rt::ForwardOptions fo;
    fo.logits = rt::LogitsMode::kNone;
    Piece out;
    out.len = static_cast<int64_t>(t.size());
    if (ps.empty()) {
      out.kv = m_.forward(input(t, 0), nullptr, fo).content;
    } else {
      const rt::PastKV ctx = past(ps);
      out.kv = m_.forward(input(t, tokens_of(ps)), &ctx, fo).content;
    }
    return out;
  }
  // Next-token logits of every row of `t` prefilled after `ps`.
  at::Tensor row_logits(const Tokens& t, const std::vector<Piece>& ps) const {
    rt::ForwardOptions fo;
    fo.logits = rt::LogitsMode::kAll;
    if (ps.empty()) return m_.forward(input(t, 0), nullptr, fo).logits;
    const rt::PastKV ctx = past(ps);
    return m_.forward(input(t, tokens_of(ps)), &ctx, fo).logits;
  }
  std::vector<Piece> prefill_all(const std::vector<Tokens>& ts) const {
    std::vector<Piece> w;
    for (const Tokens& t : ts) w.push_back(prefill(t, w));
    return w;
  }
  at::Tensor probe(const std::vector<Piece>& ps, const Tokens& q) const {
    rt::ForwardOptions fo;
    fo.logits = rt::LogitsMode::kAll;
    const rt::PastKV ctx = past(ps);
    return m_.forward(input(q, tokens_of(ps)), &ctx, fo).logits;
  }
  Tokens sample(std::mt19937_64& rng, int64_t n, bool from_model) const {
    const int64_t vocab = m_.config().vocab_size;
    Tokens t{3 + static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab - 3))};
    while (static_cast<int64_t>(t.size()) < n) {
      if (!from_model) {
        t.push_back(3 + static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab - 3)));
        continue;
      }
      rt::ForwardOptions fo;
      fo.logits = rt::LogitsMode::kLast;
      const at::Tensor p = at::softmax(m_.forward(input(t, 0), nullptr, fo).logits.reshape({-1}), 0);
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(rng());
      t.push_back(at::multinomial(p, 1, false, gen).item<int64_t>());
    }
    return t;
  }
  // Attention mass per past position from the query's rows, mean over layers, heads and rows: the
  // forward of a llama-family model with interleaved RoPE written out (checked against the runtime's
  // logits by the caller).
  std::pair<at::Tensor, at::Tensor> attention_mass(const std::vector<Piece>& ps, const Tokens& q) const {
    const rt::ModelConfig& c = m_.config();
    const rt::ModelWeights& wt = m_.weights();
    const int64_t p = tokens_of(ps), t = static_cast<int64_t>(q.size());
    const int64_t heads = c.num_heads, kv_heads = c.num_kv_heads, d = c.head_dim;
    const double eps = c.rms_norm_eps;
    const auto rms = [eps](const at::Tensor& x, const at::Tensor& w) {
      return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
    };
    const auto rope = [&c](const at::Tensor& x, int64_t start) {  // x [T, H, d], interleaved pairs
      const int64_t n = x.size(0), dim = x.size(2);
      const at::Tensor inv = at::pow(c.rope.theta, -at::arange(0, dim, 2, at::kDouble) / static_cast<double>(dim));
      const at::Tensor ang = (at::arange(start, start + n, at::kDouble).unsqueeze(1) * inv.unsqueeze(0)).to(at::kFloat);
      const at::Tensor cs = at::cos(ang).unsqueeze(1), sn = at::sin(ang).unsqueeze(1);
      const at::Tensor xr = x.reshape({n, x.size(1), dim / 2, 2});
      const at::Tensor a = xr.select(-1, 0), b = xr.select(-1, 1);
      return at::stack({a * cs - b * sn, a * sn + b * cs}, -1).reshape({n, x.size(1), dim});
    };
    at::Tensor x = wt.embed.index_select(0, at::tensor(q, at::kLong));
    at::Tensor mass = at::zeros({p}, at::kFloat);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const rt::LayerWeights& lw = wt.layers[static_cast<std::size_t>(l)];
      const at::Tensor h = rms(x, lw.attn_norm);
      const at::Tensor qq = rope(at::matmul(h, lw.wq.t()).reshape({t, heads, d}), p);
      const at::Tensor kk = rope(at::matmul(h, lw.wk.t()).reshape({t, kv_heads, d}), p);
      const at::Tensor vv = at::matmul(h, lw.wv.t()).reshape({t, kv_heads, d});
      std::vector<at::Tensor> pk, pv;
      for (const Piece& y : ps) {
        pk.push_back(y.kv[static_cast<std::size_t>(l)].k.reshape({y.len, kv_heads, d}));
        pv.push_back(y.kv[static_cast<std::size_t>(l)].v.reshape({y.len, kv_heads, d}));
      }
      const at::Tensor k = at::cat({rope(at::cat(pk, 0), 0), kk}, 0), v = at::cat({at::cat(pv, 0), vv}, 0);
      const at::Tensor kh = k.repeat_interleave(heads / kv_heads, 1).permute({1, 0, 2});
      const at::Tensor vh = v.repeat_interleave(heads / kv_heads, 1).permute({1, 0, 2});
      at::Tensor sc = at::matmul(qq.permute({1, 0, 2}), kh.transpose(1, 2)) / std::sqrt(static_cast<double>(d));
      sc = sc.masked_fill(at::ones({t, p + t}, at::kBool).triu(p + 1), -1e30);
      const at::Tensor a = at::softmax(sc, -1);
      mass += a.narrow(2, 0, p).sum(at::IntArrayRef{0, 1}) / static_cast<double>(heads * t * c.num_layers);
      x = x + at::matmul(at::matmul(a, vh).permute({1, 0, 2}).reshape({t, heads * d}), lw.wo.t());
      const at::Tensor h2 = rms(x, lw.ffn_norm);
      x = x + at::matmul(at::silu(at::matmul(h2, lw.w_gate.t())) * at::matmul(h2, lw.w_up.t()), lw.w_down.t());
    }
    return {at::matmul(rms(x, wt.final_norm), wt.lm_head.t()), mass};
  }

 private:
  const rt::Model& m_;
};

// Relative squared change of the first `rows` rows (all rows when rows <= 0), K and V, every layer.
double relative_change(const rt::Content& got, const rt::Content& exact, int64_t rows = 0) {
  double num = 0, den = 0;
  for (std::size_t l = 0; l < got.size(); ++l) {
    for (const bool keys : {true, false}) {
      at::Tensor a = keys ? got[l].k : got[l].v, b = keys ? exact[l].k : exact[l].v;
      if (rows > 0) {
        a = a.narrow(0, 0, std::min(rows, a.size(0)));
        b = b.narrow(0, 0, std::min(rows, b.size(0)));
      }
      num += (a - b).to(at::kDouble).square().sum().item<double>();
      den += b.to(at::kDouble).square().sum().item<double>();
    }
  }
  return den > 0 ? num / den : 0.0;
}

double sensitivity(const Lab& lab, const Piece& formed, const Tokens& t) {
  return rt::deficit_share(rt::deficit(formed.kv, lab.prefill(t, {}).kv), formed.kv);
}

double mass_of(const at::Tensor& mass, const std::vector<Piece>& ps, std::size_t i) {
  int64_t start = 0;
  for (std::size_t j = 0; j < i; ++j) start += ps[j].len;
  return mass.narrow(0, start, ps[i].len).sum().item<double>();
}

struct Material {
  std::string name;
  Tokens system, query;
  std::vector<Tokens> docs;
};

class Run {
 public:
  Run(const rt::Model& m, std::ofstream& out) : lab_(m), out_(out) {}

  void window(const Material& c, int seed) {
    const planner::FidelityModel model;
    std::vector<Tokens> ts{c.system};
    for (const Tokens& d : c.docs) ts.push_back(d);
    const std::vector<Piece> win = lab_.prefill_all(ts);
    std::vector<double> sens(win.size(), 0.0);
    for (std::size_t i = 1; i < win.size(); ++i) sens[i] = sensitivity(lab_, win[i], ts[i]);
    const at::Tensor exact0 = lab_.probe(win, c.query);
    const auto [logits0, mass0] = lab_.attention_mass(win, c.query);
    check_manual(logits0, exact0);
    // Each document's context KL: how far its own next-token predictions move between its place in the
    // window and alone (mean KL over its rows).
    std::vector<double> ckl(win.size(), 0.0);
    for (std::size_t i = 1; i < win.size(); ++i) {
      const std::vector<Piece> before(win.begin(), win.begin() + static_cast<std::ptrdiff_t>(i));
      ckl[i] = rt::mean_kl(lab_.row_logits(ts[i], before), lab_.row_logits(ts[i], {}));
    }
    const int64_t total = Lab::tokens_of(win);
    int64_t start = win[0].len;
    for (std::size_t i = 1; i < win.size(); ++i) {
      std::vector<Piece> w = win;
      w[i] = lab_.prefill(ts[i], {});
      emit({{"kind", "blind"},
            {"content", c.name},
            {"seed", seed},
            {"i", i},
            {"len", win[i].len},
            {"w", planner::recency_weight(win[i].len, total - start)},
            {"sens", sens[i]},
            {"ckl", ckl[i]},
            {"mass", mass_of(mass0, win, i)},
            {"kl", rt::mean_kl(exact0, lab_.probe(w, c.query))}});
      start += win[i].len;
    }
    for (std::size_t e = 1; e + 1 < win.size(); ++e) {
      std::vector<Tokens> kept_ts;
      std::vector<Piece> kept;
      std::vector<std::size_t> from;
      for (std::size_t i = 0; i < win.size(); ++i) {
        if (i == e) continue;
        kept_ts.push_back(ts[i]);
        kept.push_back(win[i]);
        from.push_back(i);
      }
      const std::vector<Piece> exact = lab_.prefill_all(kept_ts);
      const at::Tensor ref = lab_.probe(exact, c.query);
      const auto [logits, mass] = lab_.attention_mass(exact, c.query);
      check_manual(logits, ref);
      const int64_t tot = Lab::tokens_of(exact);
      int64_t pos = 0, gap = 0;
      double predicted = 0;
      for (std::size_t k = 0; k < exact.size(); ++k) {
        const std::size_t i = from[k];
        if (i > e) {
          std::vector<Piece> w = exact;
          w[k] = kept[k];
          const double f = planner::keep_change(static_cast<double>(win[e].len), static_cast<double>(gap));
          const double wt = planner::recency_weight(exact[k].len, tot - pos);
          predicted += model.predict(planner::Loss::kKeep, f, wt, sens[i]);
          emit({{"kind", "keep"},
                {"content", c.name},
                {"seed", seed},
                {"evicted", e},
                {"i", i},
                {"len", exact[k].len},
                {"f", f},
                {"w", wt},
                {"sens", sens[i]},
                {"ckl", ckl[i]},
                {"change", relative_change(kept[k].kv, exact[k].kv)},
                {"c1", relative_change(kept[k].kv, exact[k].kv, 1)},
                {"c4", relative_change(kept[k].kv, exact[k].kv, 4)},
                {"c8", relative_change(kept[k].kv, exact[k].kv, 8)},
                {"mass", mass_of(mass, exact, k)},
                {"kl", rt::mean_kl(ref, lab_.probe(w, c.query))}});
          gap += exact[k].len;
        }
        pos += exact[k].len;
      }
      emit({{"kind", "keep_all"},
            {"content", c.name},
            {"seed", seed},
            {"evicted", e},
            {"predicted", predicted},
            {"kl", rt::mean_kl(ref, lab_.probe(kept, c.query))}});
    }
  }

 private:
  static void check_manual(const at::Tensor& manual, const at::Tensor& runtime) {
    const double diff = (manual - runtime).abs().max().item<double>();
    ORBIT_CHECK(diff < 1e-3, "bench_fidelity_features: the written-out forward's logits differ from the runtime's by "
                                 << diff << " (the attention mass needs a llama-family model with interleaved RoPE)");
  }
  void emit(const json& j) { out_ << j.dump() << "\n"; }

  Lab lab_;
  std::ofstream& out_;
};

Material from_trace(const std::string& path, const rt::Tokenizer& tok) {
  std::ifstream in(path);
  ORBIT_CHECK(in.good(), "bench_fidelity_features: cannot read --traces file " << path);
  const json t = json::parse(in);
  Material c;
  c.name = std::filesystem::path(path).stem().string();
  for (const json& s : t.at("steps")) {
    if (s.value("op", "") == "turn" && s.contains("text")) {
      c.system = tok.encode(s.at("text").get<std::string>(), false);
      break;
    }
  }
  for (const json& ch : t.at("chunks")) {
    if (ch.contains("text")) c.docs.push_back(tok.encode(ch.at("text").get<std::string>(), false));
  }
  ORBIT_CHECK(!c.system.empty() && c.docs.size() >= 5 && t.contains("probe") && t.at("probe").contains("text"),
              path << ": needs a text turn, at least 5 text chunks and a text probe");
  c.query = tok.encode(t.at("probe").at("text").get<std::string>(), false);
  return c;
}

}  // namespace

int main(int argc, char** argv) try {
  const orbit::cli::Args a(
      "bench_fidelity_features",
      {{"--model", "--tokenizer", "--traces", "--seeds", "--out"},
       {},
       "usage: bench_fidelity_features --model PATH [--tokenizer PATH] [--traces FILE,...] [--seeds 8] [--out PATH]\n"
       "  Measures what predicts the loss of an instance kept as-is or served blind (JSON lines; summarise\n"
       "  with bench/fidelity/fit_features.py).\n"
       "  --model PATH      a llama2.c .bin (the attention mass needs a llama-family model)\n"
       "  --tokenizer PATH  its tokenizer (default: tok512.bin beside the model)\n"
       "  --traces F,...    orbit-trace/1 files whose texts are used as content (besides random and sampled)\n"
       "  --seeds N         windows per kind of content (default 8)\n"
       "  --out PATH        where the JSON lines go (default bench_fidelity_features.jsonl)\n"},
      argc, argv, 1);
  c10::InferenceMode guard;
  const std::string model_path = a.required("--model");
  const auto model = rt::load_model(model_path);
  const int seeds = static_cast<int>(a.get_int("--seeds", 8, 1));
  std::ofstream out(a.get_or("--out", "bench_fidelity_features.jsonl"));
  ORBIT_CHECK(out.good(), "bench_fidelity_features: cannot write --out");
  Run run(*model, out);
  const Lab lab(*model);
  for (int seed = 0; seed < seeds; ++seed) {
    for (const bool from_model : {false, true}) {
      std::mt19937_64 rng(static_cast<uint64_t>(seed) * 7 + 1);
      Material c;
      c.name = from_model ? "sampled" : "random";
      c.system = lab.sample(rng, 24, from_model);
      for (int i = 0; i < 5; ++i) c.docs.push_back(lab.sample(rng, 30 + static_cast<int64_t>(rng() % 40), from_model));
      c.query = lab.sample(rng, 12, from_model);
      run.window(c, seed);
    }
  }
  if (auto traces = a.get("--traces")) {
    const std::string tok_path =
        a.get_or("--tokenizer", (std::filesystem::path(model_path).parent_path() / "tok512.bin").string());
    const auto tok = rt::load_llama2c_tokenizer(tok_path, model->config().vocab_size);
    for (const std::string& trace : orbit::cli::split_commas(*traces)) {
      const Material base = from_trace(trace, *tok);
      for (int seed = 0; seed < seeds; ++seed) {
        Material c = base;
        std::mt19937_64 rng(static_cast<uint64_t>(seed) * 7 + 1);
        std::shuffle(c.docs.begin(), c.docs.end(), rng);
        c.docs.resize(5);
        run.window(c, seed);
      }
      std::fprintf(stderr, "%s done\n", base.name.c_str());
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_fidelity_features: error: %s\n", e.what());
  return 1;
}
