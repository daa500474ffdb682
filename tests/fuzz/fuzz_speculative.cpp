// Fuzzes speculative verification (verify_draft, verify_point_mass_draft, verify_greedy,
// verify_batch): random draft lengths and tokens (out-of-range ones too), q / p rows that are
// distributions, unnormalized, zero, point masses or hold NaN / inf / negative entries, and
// random tolerances.
// Invariants when a verification succeeds: tokens = the accepted drafts then one more token;
// accepted drafts had p_i(x_i) > 0; the last token is in range and has positive mass where it
// was drawn from (the bonus row, the residual max(0, p - q), or p without the draft token);
// the result is reproducible and verify_batch returns each item's solo result.
// Token trees (sampling/token_tree.hpp, tree_verify.hpp, ngram_drafter.hpp): random parents
// arrays (broken orders too) either build a depth-first tree or throw std::invalid_argument;
// verify_tree / verify_tree_deterministic / verify_tree_greedy return a root path plus one token
// (accepted nodes had p > 0 where sampled, the last token in range), reproducibly; n-gram
// drafts are tries whose root paths follow an earlier occurrence of the matched suffix.

#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/sampling/ngram_drafter.hpp"
#include "inferkit/sampling/speculative.hpp"
#include "inferkit/sampling/tree_verify.hpp"

using inferkit::Index;
using inferkit::TokenId;

namespace {

void fill_row(FuzzedDataProvider& in, float* row, Index vocab) {
  const int mode = in.ConsumeIntegralInRange<int>(0, 7);
  if (mode == 0) {  // a point mass
    std::fill(row, row + vocab, 0.0f);
    row[in.ConsumeIntegralInRange<Index>(0, vocab - 1)] = 1.0f;
    return;
  }
  double sum = 0.0;
  for (Index v = 0; v < vocab; ++v) {
    const int w = in.ConsumeIntegralInRange<int>(0, 8);  // many zeros
    row[v] = static_cast<float>(w > 4 ? 0 : w);
    sum += row[v];
  }
  if (mode <= 4 && sum > 0)  // a distribution (within float rounding)
    for (Index v = 0; v < vocab; ++v) row[v] = static_cast<float>(row[v] / sum);
  if (mode == 5) std::fill(row, row + vocab, 0.0f);
  if (mode == 6)  // special entries
    for (int n = in.ConsumeIntegralInRange<int>(1, 3); n > 0; --n)
      row[in.ConsumeIntegralInRange<Index>(0, vocab - 1)] = fuzz::any_float(in);
  // mode 7: unnormalized weights
}

struct Case {
  Index vocab = 1, k = 0;
  std::vector<TokenId> draft;
  std::vector<float> q, p;
  inferkit::VerifyOptions opt;
  std::uint64_t seed = 0, first = 0;
  inferkit::MatrixView<const float> qv() const { return {q.data(), k, vocab}; }
  inferkit::MatrixView<const float> pv() const { return {p.data(), k + 1, vocab}; }
  float pr(Index i, TokenId t) const { return p[static_cast<std::size_t>(i * vocab + t)]; }
  float qr(Index i, TokenId t) const { return q[static_cast<std::size_t>(i * vocab + t)]; }
};

Case any_case(FuzzedDataProvider& in) {
  Case c;
  c.vocab = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegralInRange<Index>(1, 3000)
                                                      : in.ConsumeIntegralInRange<Index>(1, 12);
  c.k = in.ConsumeIntegralInRange<Index>(0, 5);
  for (Index i = 0; i < c.k; ++i) {
    const int m = in.ConsumeIntegralInRange<int>(0, 15);
    c.draft.push_back(m == 0   ? -1
                      : m == 1 ? static_cast<TokenId>(c.vocab)
                               : static_cast<TokenId>(in.ConsumeIntegralInRange<Index>(0, c.vocab - 1)));
  }
  c.q.resize(static_cast<std::size_t>(c.k * c.vocab));
  c.p.resize(static_cast<std::size_t>((c.k + 1) * c.vocab));
  for (Index i = 0; i < c.k; ++i) fill_row(in, c.q.data() + i * c.vocab, c.vocab);
  for (Index i = 0; i <= c.k; ++i) fill_row(in, c.p.data() + i * c.vocab, c.vocab);
  static constexpr double kTol[] = {1e-3, 1e-3, 1e-3, 0.0, 1e-6, 0.5, 2.0, 1e300, -1.0};
  c.opt.tolerance = kTol[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kTol) - 1)];
  c.opt.check_all_rows = in.ConsumeBool();
  c.seed = in.ConsumeIntegral<std::uint64_t>();
  c.first = in.ConsumeIntegralInRange<std::uint64_t>(0, 1000);
  return c;
}

// Checks the shape of a result and (sampled verification) that its accepted drafts had target mass.
void check_common(const Case& c, const inferkit::VerifyResult& r, bool sampled) {
  FUZZ_CHECK(r.accepted >= 0 && r.accepted <= c.k);
  FUZZ_CHECK(static_cast<Index>(r.tokens.size()) == r.accepted + 1);
  FUZZ_CHECK(r.bonus == (r.accepted == c.k));
  for (Index i = 0; i < r.accepted; ++i) {
    FUZZ_CHECK(r.tokens[static_cast<std::size_t>(i)] == c.draft[static_cast<std::size_t>(i)]);
    if (sampled) FUZZ_CHECK(c.pr(i, c.draft[static_cast<std::size_t>(i)]) > 0.0f);
  }
  const TokenId last = r.tokens.back();
  FUZZ_CHECK(last >= 0 && last < c.vocab);
}

bool same(const inferkit::VerifyResult& a, const inferkit::VerifyResult& b) {
  return a.accepted == b.accepted && a.tokens == b.tokens && a.bonus == b.bonus;
}

void fuzz_tree(FuzzedDataProvider& in) {
  const Index vocab = in.ConsumeIntegralInRange<Index>(1, 12), n = in.ConsumeIntegralInRange<Index>(0, 70);
  std::vector<TokenId> tokens;
  std::vector<Index> parents;
  for (Index i = 0; i < n; ++i) {
    tokens.push_back(in.ConsumeIntegralInRange<TokenId>(-1, static_cast<TokenId>(vocab)));
    parents.push_back(in.ConsumeIntegralInRange<Index>(-2, i));
  }
  inferkit::TokenTree tree;
  if (!fuzz::ok([&] { tree = inferkit::TokenTree(tokens, parents); })) return;
  FUZZ_CHECK(n <= inferkit::TokenTree::kMaxNodes);
  std::vector<float> p(static_cast<std::size_t>((tree.size() + 1) * vocab)),
      q(static_cast<std::size_t>(tree.expanded_count() * vocab));
  for (Index i = 0; i <= tree.size(); ++i) fill_row(in, p.data() + i * vocab, vocab);
  for (Index i = 0; i < tree.expanded_count(); ++i) fill_row(in, q.data() + i * vocab, vocab);
  const inferkit::MatrixView<const float> pv(p.data(), tree.size() + 1, vocab),
      qv(q.data(), tree.expanded_count(), vocab);
  const inferkit::CounterRng rng(in.ConsumeIntegral<std::uint64_t>());
  const int mode = in.ConsumeIntegralInRange<int>(0, 2);
  const auto run = [&] {
    return mode == 0   ? inferkit::verify_tree(tree, qv, pv, rng, 7)
           : mode == 1 ? inferkit::verify_tree_deterministic(tree, pv, rng, 7)
                       : inferkit::verify_tree_greedy(tree, pv);
  };
  inferkit::VerifyResult r;
  if (!fuzz::ok([&] { r = run(); })) return;
  FUZZ_CHECK(r.tokens.size() == r.path.size() + 1 && r.accepted == static_cast<Index>(r.path.size()));
  Index up = inferkit::TokenTree::kRoot;
  for (std::size_t j = 0; j < r.path.size(); ++j) {  // a root path, its tokens emitted
    FUZZ_CHECK(tree.parent(r.path[j]) == up);
    FUZZ_CHECK(r.tokens[j] == tree.token(r.path[j]));
    if (mode < 2) FUZZ_CHECK(p[static_cast<std::size_t>((up + 1) * vocab + tree.token(r.path[j]))] > 0.0f);
    up = r.path[j];
  }
  FUZZ_CHECK(r.tokens.back() >= 0 && r.tokens.back() < vocab);
  FUZZ_CHECK(r.bonus == (tree.first_child(up + 1) < 0));
  FUZZ_CHECK(same(r, run()));
  // n-gram drafting over the tree's tokens as a context
  inferkit::NgramDrafterOptions o;
  o.n_min = in.ConsumeIntegralInRange<Index>(1, 3);
  o.n_max = o.n_min + in.ConsumeIntegralInRange<Index>(0, 3);
  o.max_nodes = in.ConsumeIntegralInRange<Index>(1, 64);
  inferkit::NgramDrafter d(o);
  d.extend(tree.tokens());
  const auto m = d.find();
  const auto ctx = d.context();
  const Index len = static_cast<Index>(ctx.size());
  for (Index e : m.ends) {
    FUZZ_CHECK(e >= m.n - 1 && e < len - 1);
    for (Index j = 0; j < m.n; ++j)
      FUZZ_CHECK(ctx[static_cast<std::size_t>(e - j)] == ctx[static_cast<std::size_t>(len - 1 - j)]);
  }
  const inferkit::TokenTree draft = d.draft();
  FUZZ_CHECK(draft.size() <= o.max_nodes);
  FUZZ_CHECK(draft.empty() == m.ends.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  if (size > 0 && data[0] % 4 == 0) {  // a quarter of the inputs fuzz token trees
    in.ConsumeIntegral<std::uint8_t>();
    fuzz_tree(in);
    return 0;
  }
  std::vector<Case> cases;
  for (int n = in.ConsumeIntegralInRange<int>(1, 3); n > 0; --n) cases.push_back(any_case(in));
  std::vector<inferkit::VerifyResult> solo(cases.size());
  bool all_ok = true;
  for (std::size_t j = 0; j < cases.size(); ++j) {
    const Case& c = cases[j];
    const inferkit::CounterRng rng(c.seed, j);
    const bool point_mass = c.k > 0 && in.ConsumeBool();
    inferkit::VerifyResult r;
    const bool ok = fuzz::ok([&] {
      r = point_mass ? inferkit::verify_point_mass_draft(c.draft, c.pv(), rng, c.first, c.opt)
                     : inferkit::verify_draft(c.draft, c.qv(), c.pv(), rng, c.first, c.opt);
    });
    if (ok) {
      check_common(c, r, true);
      const TokenId last = r.tokens.back();
      const Index at = r.accepted;
      if (!(c.pr(at, last) > 0.0f)) {
        double sum = 0.0;
        for (Index v = 0; v < c.vocab; ++v) sum += c.pr(at, static_cast<TokenId>(v));
        std::fprintf(stderr, "vocab %ld k %ld accepted %ld bonus %d token %d p %g row sum %g tolerance %g\n",
                     long(c.vocab), long(c.k), long(at), int(r.bonus), int(last), double(c.pr(at, last)), sum,
                     c.opt.tolerance);
      }
      if (r.bonus) {
        FUZZ_CHECK(c.pr(at, last) > 0.0f);
      } else if (point_mass) {
        FUZZ_CHECK(last != c.draft[static_cast<std::size_t>(at)] && c.pr(at, last) > 0.0f);
      } else {
        bool residual = false;  // residual max(0, p - q) has mass, or p when it has none
        for (Index v = 0; v < c.vocab; ++v)
          residual = residual || c.pr(at, static_cast<TokenId>(v)) - c.qr(at, static_cast<TokenId>(v)) > 0.0f;
        FUZZ_CHECK(residual ? c.pr(at, last) - c.qr(at, last) > 0.0f : c.pr(at, last) > 0.0f);
      }
      inferkit::VerifyResult again = point_mass
                                         ? inferkit::verify_point_mass_draft(c.draft, c.pv(), rng, c.first, c.opt)
                                         : inferkit::verify_draft(c.draft, c.qv(), c.pv(), rng, c.first, c.opt);
      FUZZ_CHECK(same(r, again));
      solo[j] = r;
    }
    // verify_batch uses point-mass verification exactly when q has no rows and the draft is not empty.
    all_ok = all_ok && ok && (point_mass || c.k == 0);
    inferkit::VerifyResult g;
    if (fuzz::ok([&] { g = inferkit::verify_greedy(c.draft, c.pv()); })) {
      check_common(c, g, false);
      for (std::size_t i = 0; i < g.tokens.size(); ++i)
        FUZZ_CHECK(g.tokens[i] == inferkit::argmax_token(c.pv().row(static_cast<Index>(i))));
    }
  }
  if (!all_ok) return 0;
  std::vector<inferkit::DraftToVerify> items;
  for (std::size_t j = 0; j < cases.size(); ++j)
    items.push_back({cases[j].draft, {}, cases[j].pv(), inferkit::CounterRng(cases[j].seed, j), cases[j].first});
  // Items share one options struct in a batch: only compare when every case used the same.
  for (const Case& c : cases)
    if (c.opt.tolerance != cases[0].opt.tolerance || c.opt.check_all_rows != cases[0].opt.check_all_rows) return 0;
  const auto batch = inferkit::verify_batch(items, cases[0].opt);
  for (std::size_t j = 0; j < cases.size(); ++j) FUZZ_CHECK(same(batch[j], solo[j]));
  return 0;
}
