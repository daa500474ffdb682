// Fuzzes the sampler chain: random SamplingParams (often invalid) through both presets, or a
// hand-built chain of random stages; logits with -inf / NaN / +inf entries; vocabularies of 1 to
// 300k tokens; histories and token lists with out-of-range ids; SamplerState::from_bytes on
// random bytes (versions 1 and 2).
// Invariants when a draw succeeds: the token is in [0, vocab) and not filtered (its processed
// logit is > -inf); the returned distribution sums to 1 and gives the token positive mass; the
// draw is reproducible (same inputs, same token and distribution bits); sample_batch gives each
// row what sample() gives it alone; a state survives to_bytes() / from_bytes().

#include <cstring>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/sampling/presets.hpp"
#include "inferkit/sampling/sampler_chain.hpp"

using inferkit::Index;
using inferkit::TokenId;

namespace {

TokenId any_token(FuzzedDataProvider& in, Index vocab) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return -1;
    case 1:
      return static_cast<TokenId>(vocab);
    case 2:
      return in.ConsumeIntegral<TokenId>();
    default:
      return static_cast<TokenId>(in.ConsumeIntegralInRange<Index>(0, std::min<Index>(vocab - 1, 40)));
  }
}
std::vector<TokenId> any_tokens(FuzzedDataProvider& in, Index vocab, int max_n) {
  std::vector<TokenId> v(static_cast<std::size_t>(in.ConsumeIntegralInRange<int>(0, max_n)));
  for (auto& t : v) t = any_token(in, vocab);
  return v;
}
Index any_count(FuzzedDataProvider& in) {
  static constexpr Index kValues[] = {-2, -1, 0, 1, 2, 3, 5, 40, 1 << 20};
  return kValues[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kValues) - 1)];
}
// A parameter that is usually in its valid range [lo, hi], sometimes anything.
float param(FuzzedDataProvider& in, float lo, float hi) {
  return in.ConsumeIntegralInRange<int>(0, 5) == 0 ? fuzz::any_float(in)
                                                   : in.ConsumeFloatingPointInRange<float>(lo, hi);
}

inferkit::SamplingParams any_params(FuzzedDataProvider& in, Index vocab) {
  inferkit::SamplingParams p;
  const auto maybe = [&] { return in.ConsumeIntegralInRange<int>(0, 2) == 0; };
  if (maybe()) p.temperature = param(in, 0.0f, 2.0f);
  if (maybe()) p.top_k = any_count(in);
  if (maybe()) p.top_p = param(in, 0.0f, 1.0f);
  if (maybe()) p.min_p = param(in, 0.0f, 1.0f);
  if (maybe()) p.typical_p = param(in, 0.0f, 1.0f);
  if (maybe()) p.repetition_penalty = param(in, 0.5f, 2.0f);
  if (maybe()) p.frequency_penalty = param(in, -1.0f, 1.0f);
  if (maybe()) p.presence_penalty = param(in, -1.0f, 1.0f);
  if (maybe()) p.min_keep = any_count(in);
  if (maybe()) p.penalty_last_n = any_count(in);
  if (maybe()) p.dynatemp_range = param(in, 0.0f, 1.0f);
  if (maybe()) p.dynatemp_exponent = param(in, 0.0f, 2.0f);
  if (maybe()) p.top_n_sigma = param(in, -1.0f, 3.0f);
  if (maybe()) p.xtc_probability = param(in, 0.0f, 1.0f);
  if (maybe()) p.xtc_threshold = param(in, 0.0f, 1.0f);
  if (maybe()) p.dry_multiplier = param(in, 0.0f, 2.0f);
  if (maybe()) p.dry_base = param(in, 1.0f, 3.0f);
  if (maybe()) p.dry_allowed_length = any_count(in);
  if (maybe()) p.dry_penalty_last_n = any_count(in);
  if (maybe()) p.dry_sequence_breakers = {any_tokens(in, vocab, 3), any_tokens(in, vocab, 2)};
  if (maybe()) p.mirostat = in.ConsumeIntegralInRange<int>(-1, 3);
  if (maybe()) p.mirostat_tau = param(in, 0.0f, 10.0f);
  if (maybe()) p.mirostat_eta = param(in, 0.0f, 1.0f);
  if (maybe()) p.epsilon_cutoff = param(in, 0.0f, 0.5f);
  if (maybe()) p.eta_cutoff = param(in, 0.0f, 0.5f);
  if (maybe()) p.eos_token_ids = any_tokens(in, vocab, 2);
  if (maybe()) p.min_new_tokens = any_count(in);
  if (maybe()) p.exponential_decay_start = any_count(in);
  if (maybe()) p.exponential_decay_factor = param(in, 1.0f, 2.0f);
  if (maybe()) p.bad_words = {any_tokens(in, vocab, 3), any_tokens(in, vocab, 1)};
  if (maybe()) p.sequence_bias = {{any_tokens(in, vocab, 3), param(in, -5.0f, 5.0f)}};
  if (maybe()) p.begin_suppress_tokens = any_tokens(in, vocab, 3);
  return p;
}

inferkit::SamplerChain any_chain(FuzzedDataProvider& in, Index vocab) {
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      return inferkit::presets::huggingface(any_params(in, vocab));
    case 1:
      return inferkit::presets::llama_cpp(any_params(in, vocab));
    default:
      break;
  }
  inferkit::SamplerChain c;
  for (int n = in.ConsumeIntegralInRange<int>(0, 5); n > 0; --n) {
    switch (in.ConsumeIntegralInRange<int>(0, 9)) {
      case 0:
        c.add(inferkit::Temperature{param(in, 0.0f, 2.0f)});
        break;
      case 1:
        c.add(inferkit::TopK{any_count(in)});
        break;
      case 2:
        c.add(inferkit::TopP{param(in, 0.0f, 1.0f), any_count(in)});
        break;
      case 3:
        c.add(inferkit::MinP{param(in, 0.0f, 1.0f), any_count(in)});
        break;
      case 4:
        c.add(inferkit::Typical{param(in, 0.0f, 1.0f), any_count(in)});
        break;
      case 5:
        c.add(inferkit::NoRepeatNgram{any_count(in)});
        break;
      case 6:
        c.add(inferkit::LogitBias{
            {{any_token(in, vocab), fuzz::any_float(in)}, {any_token(in, vocab), param(in, -3.0f, 3.0f)}}});
        break;
      case 7:
        c.add(inferkit::BannedTokens{any_tokens(in, vocab, 4)});
        break;
      case 8:
        c.add(inferkit::AllowedTokens{any_tokens(in, vocab, 4)});
        break;
      default:
        c.add(inferkit::RepetitionPenalty{param(in, 0.5f, 2.0f), any_count(in)});
        break;
    }
  }
  return c;
}

std::vector<float> any_logits(FuzzedDataProvider& in, Index vocab) {
  std::vector<float> l(static_cast<std::size_t>(vocab));
  std::uint64_t x = in.ConsumeIntegral<std::uint64_t>() | 1;
  const float spread = param(in, 0.0f, 30.0f);
  for (float& v : l) {  // a cheap xorshift fills large vocabularies; the input places specials
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = std::isfinite(spread) ? static_cast<float>(static_cast<double>(x >> 11) * 0x1p-53 * spread) : spread;
  }
  for (int n = in.ConsumeIntegralInRange<int>(0, 8); n > 0; --n)
    l[in.ConsumeIntegralInRange<std::size_t>(0, l.size() - 1)] = fuzz::any_float(in);
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) std::fill(l.begin(), l.end(), -std::numeric_limits<float>::infinity());
  return l;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  {  // SamplerState::from_bytes on (mostly) random bytes; a valid state round-trips.
    std::vector<std::uint8_t> b = in.ConsumeBytes<std::uint8_t>(in.ConsumeIntegralInRange<std::size_t>(0, 64));
    if (b.size() >= 4 && in.ConsumeBool()) std::memcpy(b.data(), "IKSS", 4);
    if (b.size() >= 6 && in.ConsumeBool()) {  // version 1 or 2 (2: records after 26 bytes)
      b[4] = in.ConsumeBool() ? 1 : 2;
      b[5] = 0;
    }
    inferkit::SamplerState s;
    if (fuzz::ok([&] { s = inferkit::SamplerState::from_bytes(b); }))
      FUZZ_CHECK(inferkit::SamplerState::from_bytes(s.to_bytes()) == s);
  }
  const Index vocab =
      in.ConsumeBool() ? in.ConsumeIntegralInRange<Index>(1, 64) : in.ConsumeIntegralInRange<Index>(1, 300000);
  inferkit::SamplerChain chain;
  if (!fuzz::ok([&] { chain = any_chain(in, vocab); })) return 0;
  (void)chain.describe();
  const int rows = in.ConsumeIntegralInRange<int>(1, vocab > 4096 ? 1 : 3);
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<TokenId>> history;
  for (int r = 0; r < rows; ++r) {
    logits.push_back(any_logits(in, vocab));
    history.push_back(any_tokens(in, vocab, 12));
  }
  const std::uint64_t seed = in.ConsumeIntegral<std::uint64_t>(), draw = in.ConsumeIntegralInRange<std::uint64_t>(0, 3);
  const Index generated = in.ConsumeIntegralInRange<Index>(-1, 4);

  std::vector<TokenId> alone(static_cast<std::size_t>(rows), -2);
  std::vector<inferkit::SamplerState> states;
  for (int r = 0; r < rows; ++r) {
    inferkit::SamplerState st;
    if (!fuzz::ok([&] { st = chain.make_state(generated); })) return 0;
    states.push_back(st);
    const inferkit::CounterRng rng(seed, static_cast<std::uint64_t>(r));
    std::vector<float> l = logits[static_cast<std::size_t>(r)], dist(static_cast<std::size_t>(vocab));
    TokenId t = -2;
    if (!fuzz::ok([&] { t = chain.sample(l, history[static_cast<std::size_t>(r)], st, rng, draw, dist); })) continue;
    FUZZ_CHECK(t >= 0 && t < vocab);
    FUZZ_CHECK(l[static_cast<std::size_t>(t)] > -std::numeric_limits<float>::infinity());
    double sum = 0.0;
    for (float p : dist) {
      FUZZ_CHECK(p >= 0.0f && p <= 1.0f);
      sum += p;
    }
    FUZZ_CHECK(std::abs(sum - 1.0) <= 1e-3);
    FUZZ_CHECK(dist[static_cast<std::size_t>(t)] > 0.0f);
    // Reproducible: the same inputs give the same token, logits and distribution bits.
    inferkit::SamplerState st2 = states.back();
    std::vector<float> l2 = logits[static_cast<std::size_t>(r)], dist2(dist.size());
    FUZZ_CHECK(chain.sample(l2, history[static_cast<std::size_t>(r)], st2, rng, draw, dist2) == t);
    FUZZ_CHECK(same_bits(l, l2) && same_bits(dist, dist2) && st == st2);
    FUZZ_CHECK(inferkit::SamplerState::from_bytes(st.to_bytes()) == st);
    chain.accept(st, t);
    FUZZ_CHECK(st.generated() == generated + 1);
    alone[static_cast<std::size_t>(r)] = t;
  }

  // The batch gives every row its solo token (when every row samples: a batch throws otherwise).
  if (std::count(alone.begin(), alone.end(), -2) != 0) return 0;
  std::vector<float> flat;
  for (const auto& l : logits) flat.insert(flat.end(), l.begin(), l.end());
  std::vector<std::span<const TokenId>> hs(history.begin(), history.end());
  std::vector<std::uint64_t> streams(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) streams[static_cast<std::size_t>(r)] = static_cast<std::uint64_t>(r);
  std::vector<TokenId> out(static_cast<std::size_t>(rows), -3);
  chain.sample_batch(inferkit::MatrixView<float>(flat.data(), rows, vocab), hs, states, seed, streams, draw, out);
  FUZZ_CHECK(out == alone);
  return 0;
}
