// The chain with the new rules: presets and their order, the chain against its stages applied
// one by one, the per-request state (Mirostat's controller, generated-token counts, copies,
// serialization), batched sampling across thread counts, and misuse.
#include "sampling/sampling_test_util.hpp"

#include <cstring>
#include <random>

#include "inferkit/sampling/presets.hpp"
#include "inferkit/sampling/sampler_chain.hpp"
#include "inferkit/sampling/typical.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;

namespace {

// llama.cpp-style settings with every new truncation on (no dynamic temperature: it is checked
// to a tolerance elsewhere, the chain here bit for bit).
inferkit::SamplingParams full_params() {
  inferkit::SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.typical_p = 0.97f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.1f;
  p.penalty_last_n = 64;
  p.dry_multiplier = 0.8f;
  p.dry_sequence_breakers = {{3}, {5, 6}};
  p.top_n_sigma = 2.5f;
  p.epsilon_cutoff = 3e-4f;
  p.eta_cutoff = 2e-3f;
  p.xtc_probability = 1.0f;
  p.xtc_threshold = 0.05f;
  return p;
}

std::vector<TokenId> repetitive_history(std::size_t n, TokenId vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<TokenId> phrase(9);
  for (auto& t : phrase) t = static_cast<TokenId>(rng() % static_cast<unsigned>(vocab));
  std::vector<TokenId> h;
  while (h.size() < n) {
    h.insert(h.end(), phrase.begin(), phrase.end());
    h.push_back(static_cast<TokenId>(rng() % static_cast<unsigned>(vocab)));
  }
  h.resize(n);
  return h;
}

std::span<const TokenId> tail(const std::vector<TokenId>& h, Index n) {
  return n < 0 || static_cast<std::size_t>(n) >= h.size()
             ? std::span<const TokenId>(h)
             : std::span<const TokenId>(h).subspan(h.size() - std::size_t(n));
}

// Zipf logits over n tokens.
std::vector<float> zipf(std::size_t n, double s) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(-s * std::log(double(i + 1)));
  return x;
}

}  // namespace

TEST_CASE("presets place the new rules where their home projects do", "[sampling][chain][presets]") {
  auto p = full_params();
  p.dynatemp_range = 0.5f;
  p.sequence_bias = {{{1, 2}, -1.0f}};
  p.bad_words = {{7}};
  p.eos_token_ids = {2};
  p.min_new_tokens = 4;
  p.exponential_decay_start = 10;
  p.exponential_decay_factor = 1.05f;
  p.begin_suppress_tokens = {9};
  const std::string hf_front =
      "sequence_bias(1) -> repetition_penalty(1.1, 64) -> frequency_presence_penalty(0.2, 0.1, 64) -> dry(0.8, 1.75, "
      "2, -1) "
      "-> bad_words(1) -> min_new_tokens(4) -> exponential_decay_length_penalty(10, 1.05) -> begin_suppress_tokens(1)";
  CHECK(inferkit::presets::huggingface(p).describe() ==
        hf_front +
            " -> dynamic_temperature(0.8, 0.5, 1) -> top_n_sigma(2.5) -> top_k(40) -> top_p(0.95) -> min_p(0.05) -> "
            "typical_p(0.97) -> epsilon_cutoff(0.0003) -> eta_cutoff(0.002) -> xtc(0.05, 1) -> draw");
  CHECK(inferkit::presets::llama_cpp(p).describe() ==
        "sequence_bias(1) -> bad_words(1) -> min_new_tokens(4) -> exponential_decay_length_penalty(10, 1.05) -> "
        "begin_suppress_tokens(1) -> repetition_penalty(1.1, 64) -> frequency_presence_penalty(0.2, 0.1, 64) -> "
        "dry(0.8, 1.75, 2, -1) -> top_n_sigma(2.5) -> top_k(40) -> typical_p(0.97) -> top_p(0.95) -> min_p(0.05) -> "
        "epsilon_cutoff(0.0003) -> eta_cutoff(0.002) -> xtc(0.05, 1) -> dynamic_temperature(0.8, 0.5, 1) -> draw");
  // Mirostat replaces the truncations (and, in llama.cpp's order, the penalties and DRY).
  p.mirostat = 2;
  CHECK(inferkit::presets::huggingface(p).describe() ==
        hf_front + " -> temperature(0.8) -> mirostat_v2(5, 0.1) -> draw");
  CHECK(inferkit::presets::llama_cpp(p).describe() ==
        "sequence_bias(1) -> bad_words(1) -> min_new_tokens(4) -> exponential_decay_length_penalty(10, 1.05) -> "
        "begin_suppress_tokens(1) -> temperature(0.8) -> mirostat_v2(5, 0.1) -> draw");
  p.mirostat = 1;
  CHECK(inferkit::presets::llama_cpp({.temperature = 0.7f, .mirostat = 1}).describe() ==
        "temperature(0.7) -> mirostat_v1(5, 0.1, 100) -> draw");
  // top_p = 0 is accepted; bad preset values name their parameter.
  CHECK(inferkit::presets::llama_cpp({.top_p = 0.0f}).describe() == "top_p(0) -> draw");
  CHECK_THROWS_WITH(inferkit::presets::llama_cpp({.mirostat = 3}), Contains("mirostat = 3"));
  CHECK_THROWS_WITH(inferkit::presets::llama_cpp({.mirostat_tau = -5.0f}), Contains("mirostat_tau = -5"));
  CHECK_THROWS_WITH(inferkit::presets::huggingface({.epsilon_cutoff = 1.0f}), Contains("epsilon_cutoff = 1"));
  CHECK_THROWS_WITH(inferkit::presets::huggingface({.penalty_last_n = -3}), Contains("penalty_last_n = -3"));
  CHECK_THROWS_WITH(inferkit::presets::huggingface({.dry_base = 0.5f}), Contains("dry_base = 0.5"));
  CHECK_THROWS_WITH(inferkit::presets::huggingface({.xtc_threshold = 2.0f}), Contains("xtc_threshold = 2"));
  CHECK_THROWS_WITH(inferkit::presets::huggingface({.min_new_tokens = 3}), Contains("eos_token_ids.size()"));
  CHECK_THROWS_WITH(inferkit::SamplerChain().add(inferkit::Mirostat{}).add(inferkit::Mirostat{}), Contains("mirostat"));
  CHECK_THROWS_WITH(inferkit::SamplerChain().add(inferkit::Xtc{}).add(inferkit::Xtc{}), Contains("xtc"));
}

TEST_CASE("the full chain equals its stages applied one by one, then the reference draw", "[sampling][chain]") {
  const auto p = full_params();
  const inferkit::CounterRng rng(42, 5);
  for (const auto& chain : {inferkit::presets::huggingface(p), inferkit::presets::llama_cpp(p)})
    for (std::size_t n : {60u, 32000u, 128256u})
      for (unsigned trial = 0; trial < 4; ++trial) {
        INFO(chain.describe() << ", V = " << n << ", trial " << trial);
        auto x = test::random_logits(n, 50 + trial, 2.5f, trial % 2 == 1);
        const auto history = repetitive_history(1000, static_cast<TokenId>(std::min<std::size_t>(n, 500)), trial);
        auto ref = x;
        const TokenId got = chain.sample(x, history, rng, trial);
        for (const auto& proc : chain.processors()) {
          using namespace inferkit;
          if (auto* q = std::get_if<RepetitionPenalty>(&proc))
            apply_repetition_penalty(ref, tail(history, q->last_n), q->penalty);
          if (auto* q = std::get_if<FrequencyPresencePenalty>(&proc))
            apply_frequency_presence_penalty(ref, tail(history, q->last_n), q->frequency, q->presence);
          if (auto* q = std::get_if<Dry>(&proc)) reference::dry(ref, history, *q);
          if (auto* q = std::get_if<TopNSigma>(&proc)) reference::top_n_sigma(ref, q->n);
          if (auto* q = std::get_if<Temperature>(&proc)) reference::temperature(ref, q->value);
          if (auto* q = std::get_if<TopK>(&proc)) reference::top_k(ref, q->k);
          if (auto* q = std::get_if<TopP>(&proc)) reference::top_p(ref, q->p, q->min_keep);
          if (auto* q = std::get_if<MinP>(&proc)) reference::min_p(ref, q->p, q->min_keep);
          if (auto* q = std::get_if<Typical>(&proc)) apply_typical(std::span<float>(ref), q->mass, q->min_keep);
          if (auto* q = std::get_if<EpsilonCutoff>(&proc)) reference::epsilon_cutoff(ref, *q);
          if (auto* q = std::get_if<EtaCutoff>(&proc)) reference::eta_cutoff(ref, *q);
          if (auto* q = std::get_if<Xtc>(&proc)) reference::xtc(ref, *q, xtc_uniform(rng, trial));
        }
        CHECK(test::same_bits(x, ref));
        CHECK(got == inferkit::reference::draw(ref, rng.uniform_double(trial)));
      }
}

TEST_CASE("stateful chains need a state; a stateless call says so", "[sampling][chain][state][errors]") {
  std::vector<float> x(10, 0.0f);
  const inferkit::CounterRng rng(1);
  auto mirostat = inferkit::SamplerChain().add(inferkit::Mirostat{});
  CHECK(mirostat.stateful());
  CHECK_THROWS_WITH(mirostat.sample(x, {}, rng, 0), Contains("SamplerState"));
  inferkit::SamplerState plain;  // no mu: not made by this chain
  CHECK_THROWS_WITH(mirostat.sample(x, {}, plain, rng, 0), Contains("mirostat"));
  auto counting = inferkit::SamplerChain().add(inferkit::MinNewTokens{2, {0}});
  CHECK(counting.stateful());
  CHECK_THROWS_AS(counting.apply(x, {}), std::invalid_argument);
  auto xtc = inferkit::SamplerChain().add(inferkit::Xtc{0.1f, 0.5f});
  CHECK(!xtc.stateful());
  CHECK_THROWS_WITH(xtc.apply(x, {}), Contains("rng"));
  auto s = counting.make_state();
  CHECK_THROWS_AS(counting.accept(s, -1), std::out_of_range);
  CHECK_THROWS_WITH(counting.make_state(-1), Contains("generated = -1"));
}

TEST_CASE("min_new_tokens and begin-suppress count accepted tokens through the state", "[sampling][chain][state]") {
  const auto chain = inferkit::presets::huggingface(
      {.temperature = 0.0f, .eos_token_ids = {0}, .min_new_tokens = 3, .begin_suppress_tokens = {1}});
  auto state = chain.make_state();
  std::vector<TokenId> out;
  const inferkit::CounterRng rng(3);
  for (int step = 0; step < 5; ++step) {
    std::vector<float> x{9.0f, 8.0f, 1.0f, 0.5f};  // EOS (0) is the greedy choice, then 1
    const TokenId t = chain.sample(x, out, state, rng, static_cast<std::uint64_t>(step));
    chain.accept(state, t);
    out.push_back(t);
  }
  CHECK(out == std::vector<TokenId>{2, 1, 1, 0, 0});
  CHECK(state.generated() == 5);
  // A resumed request (make_state(generated)) continues where it left off.
  auto resumed = chain.make_state(3);
  std::vector<float> x{9.0f, 8.0f, 1.0f, 0.5f};
  CHECK(chain.sample(x, out, resumed, rng, 9) == 0);
}

TEST_CASE("Mirostat: accept() applies the update from the drawn token's surprise", "[sampling][chain][mirostat]") {
  for (int version : {1, 2}) {
    const auto chain = inferkit::SamplerChain().add(inferkit::Mirostat{version, 4.0f, 0.2f, 100});
    auto state = chain.make_state();
    REQUIRE(state.mirostat_mu() == 8.0f);
    const inferkit::CounterRng rng(11);
    auto x = zipf(5000, 1.2);
    std::vector<float> dist(x.size());
    const TokenId t = chain.sample(x, {}, state, rng, 0, dist);
    CHECK(state.pending_token() == t);
    const double surprise = -std::log2(double(dist[static_cast<std::size_t>(t)]));
    chain.accept(state, t);
    CHECK(state.mirostat_mu() == Approx(8.0 - 0.2 * (surprise - 4.0)).epsilon(1e-5));
    CHECK(state.pending_token() == -1);
    CHECK(state.generated() == 1);
    // A token the chain did not draw is counted but leaves mu alone.
    const float mu = state.mirostat_mu();
    auto y = zipf(5000, 1.2);
    const TokenId u = chain.sample(y, {}, state, rng, 1);
    chain.accept(state, u + 1);
    CHECK(state.mirostat_mu() == mu);
    CHECK(state.generated() == 2);
  }
}

TEST_CASE("Mirostat's controller holds the observed surprise near tau", "[sampling][chain][mirostat][statistics]") {
  // A fixed Zipf distribution; after a burn-in the mean surprise of the drawn tokens is tau.
  for (int version : {1, 2})
    for (float tau : {3.0f, 5.0f}) {
      INFO("version " << version << ", tau " << tau);
      const auto chain = inferkit::SamplerChain().add(inferkit::Mirostat{version, tau, 0.1f, 100});
      auto state = chain.make_state();
      const inferkit::CounterRng rng(2024, static_cast<std::uint64_t>(version));
      const auto base = zipf(32000, 1.1);
      std::vector<float> dist(base.size());
      double sum = 0;
      int counted = 0;
      for (int step = 0; step < 2500; ++step) {
        auto x = base;
        const TokenId t = chain.sample(x, {}, state, rng, static_cast<std::uint64_t>(step), dist);
        if (step >= 500) {
          sum += -std::log2(double(dist[static_cast<std::size_t>(t)]));
          ++counted;
        }
        chain.accept(state, t);
      }
      CHECK(sum / counted == Approx(tau).margin(0.3));
    }
}

TEST_CASE("a state copies (beam forks, rollback) and serializes exactly", "[sampling][chain][state]") {
  const auto chain = inferkit::presets::llama_cpp(
      {.temperature = 0.9f, .mirostat = 2, .mirostat_tau = 4.0f, .eos_token_ids = {0}, .min_new_tokens = 2});
  auto state = chain.make_state();
  const inferkit::CounterRng rng(5);
  std::vector<TokenId> out;
  const auto step = [&](inferkit::SamplerState& s, std::vector<TokenId>& o, std::uint64_t i) {
    auto x = test::random_logits(3000, static_cast<unsigned>(i), 3.0f);
    const TokenId t = chain.sample(x, o, s, rng, i);
    chain.accept(s, t);
    o.push_back(t);
  };
  for (std::uint64_t i = 0; i < 6; ++i) step(state, out, i);
  // Rollback: a copy taken before speculative steps restores the exact continuation.
  const auto saved = state;
  const auto saved_out = out;
  for (std::uint64_t i = 6; i < 9; ++i) step(state, out, i);
  const auto after = out;
  state = saved;
  out = saved_out;
  for (std::uint64_t i = 6; i < 9; ++i) step(state, out, i);
  CHECK(out == after);
  // Serialization: the bytes restore an equal state, which continues identically.
  auto mid = chain.make_state();
  std::vector<TokenId> a, b;
  for (std::uint64_t i = 0; i < 4; ++i) step(mid, a, i);
  auto x = test::random_logits(3000, 99, 3.0f);
  chain.sample(x, a, mid, rng, 4);  // a pending draw is part of the state too
  const auto bytes = mid.to_bytes();
  REQUIRE(bytes.size() == inferkit::SamplerState::kSerializedSize);
  CHECK(std::string(bytes.begin(), bytes.begin() + 4) == "IKSS");
  auto back = inferkit::SamplerState::from_bytes(bytes);
  CHECK(back == mid);
  CHECK(back.pending_token() == mid.pending_token());
  b = a;
  chain.accept(mid, mid.pending_token());
  chain.accept(back, back.pending_token());
  CHECK(back == mid);
  CHECK(back.mirostat_mu() == mid.mirostat_mu());
  // Malformed bytes name what is wrong.
  auto bad = bytes;
  bad.pop_back();
  CHECK_THROWS_WITH(inferkit::SamplerState::from_bytes(bad), Contains("bytes.size() = 27"));
  bad = bytes;
  bad[0] = 'X';
  CHECK_THROWS_WITH(inferkit::SamplerState::from_bytes(bad), Contains("magic"));
  bad = bytes;
  bad[4] = 9;
  CHECK_THROWS_WITH(inferkit::SamplerState::from_bytes(bad), Contains("version = 9"));
  bad = bytes;
  bad[6] = 0x80;
  CHECK_THROWS_WITH(inferkit::SamplerState::from_bytes(bad), Contains("flags"));
  bad = bytes;
  bad[15] = 0x80;  // generated < 0
  CHECK_THROWS_WITH(inferkit::SamplerState::from_bytes(bad), Contains("generated"));
  bad = bytes;
  bad[16] = bad[17] = 0xFF;
  bad[18] = 0xC0;
  bad[19] = 0x7F;  // mu = NaN
  CHECK_THROWS_WITH(inferkit::SamplerState::from_bytes(bad), Contains("mu"));
}

TEST_CASE("batched stateful sampling does not depend on the thread count", "[sampling][chain][state][threads]") {
  auto p = full_params();
  p.dynatemp_range = 0.4f;
  p.min_new_tokens = 1;
  p.eos_token_ids = {0};
  for (const auto& chain :
       {inferkit::presets::llama_cpp(p), inferkit::presets::llama_cpp({.temperature = 0.8f, .mirostat = 2})}) {
    const Index rows = 12, vocab = 4000;
    const auto base = test::random_logits(static_cast<std::size_t>(rows * vocab), 31, 2.0f);
    std::vector<std::vector<TokenId>> hist;
    for (Index r = 0; r < rows; ++r) hist.push_back(repetitive_history(300 + 10 * std::size_t(r), 200, unsigned(r)));
    std::vector<std::span<const TokenId>> spans(hist.begin(), hist.end());
    std::vector<std::uint64_t> streams(rows);
    for (Index r = 0; r < rows; ++r) streams[r] = static_cast<std::uint64_t>(7 + r);
    std::vector<inferkit::SamplerState> one(rows, chain.make_state()), two = one;
    std::vector<TokenId> t1(rows), t2(rows);
    for (std::uint64_t step = 0; step < 3; ++step) {
      auto a = base, b = base;
      chain.sample_batch({a.data(), rows, vocab}, spans, one, 9, streams, step, t1, 1);
      chain.sample_batch({b.data(), rows, vocab}, spans, two, 9, streams, step, t2, 2);
      REQUIRE(t1 == t2);
      REQUIRE(test::same_bits(a, b));
      for (Index r = 0; r < rows; ++r) {
        chain.accept(one[static_cast<std::size_t>(r)], t1[static_cast<std::size_t>(r)]);
        chain.accept(two[static_cast<std::size_t>(r)], t2[static_cast<std::size_t>(r)]);
      }
      REQUIRE(one == two);
    }
    // Row r alone with its state and stream gives the same token.
    auto solo = chain.make_state();
    for (std::uint64_t step = 0; step < 3; ++step) {
      std::vector<float> row(base.begin(), base.begin() + vocab);
      const TokenId t = chain.sample(row, spans[0], solo, inferkit::CounterRng(9, streams[0]), step);
      chain.accept(solo, t);
    }
    CHECK(solo == one[0]);
  }
}

namespace {
// Little-endian bytes, written here independently of the state's serializer.
void put(std::vector<std::uint8_t>& b, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
}  // namespace

TEST_CASE("state bytes: version 1 stays readable, version 2 holds rule states as records", "[sampling][state]") {
  using inferkit::SamplerState;
  const auto chain = inferkit::SamplerChain().add(inferkit::Mirostat{2, 4.0f, 0.2f, 100});
  auto state = chain.make_state(5);
  std::vector<float> x = zipf(2000, 1.1);
  const TokenId t = chain.sample(x, {}, state, inferkit::CounterRng(3), 0);
  REQUIRE(state.pending_token() == t);
  const float mu = state.mirostat_mu();

  // Version 1 as the format was defined before rule states had records (28 bytes).
  std::vector<std::uint8_t> v1{'I', 'K', 'S', 'S'};
  put(v1, 1, 2);
  put(v1, 3, 2);  // mu present, pending draw
  put(v1, 5, 8);
  put(v1, bits(7.25f), 4);
  put(v1, 42, 4);
  put(v1, bits(3.5f), 4);
  const SamplerState read1 = SamplerState::from_bytes(v1);
  CHECK(read1.generated() == 5);
  CHECK(read1.mirostat_mu() == 7.25f);
  CHECK(read1.pending_token() == 42);
  CHECK(read1.to_bytes() == v1);  // a Mirostat state is still written as version 1
  CHECK(state.to_bytes().size() == SamplerState::kSerializedSize);

  // Version 2 of the same state: the fixed part, then one record (tag 1, 4 bytes, mu).
  std::vector<std::uint8_t> v2{'I', 'K', 'S', 'S'};
  put(v2, 2, 2);
  put(v2, 1, 2);  // pending draw
  put(v2, 5, 8);
  put(v2, static_cast<std::uint32_t>(t), 4);
  const auto ours = state.to_bytes(2);
  REQUIRE(ours.size() == 26 + 6 + 4);
  v2.insert(v2.end(), ours.begin() + 20, ours.begin() + 24);  // the surprise, as the chain computed it
  put(v2, 1, 2);                                              // one record
  put(v2, inferkit::MirostatState::kTag, 2);
  put(v2, 4, 4);
  put(v2, bits(mu), 4);
  CHECK(ours == v2);
  const SamplerState read2 = SamplerState::from_bytes(v2);
  CHECK(read2 == state);
  CHECK(read2.to_bytes() == state.to_bytes());
  // Without rule states: no records.
  const auto plain = inferkit::SamplerChain().add(inferkit::MinNewTokens{1, {0}}).make_state(9);
  const auto plain2 = plain.to_bytes(2);
  CHECK(plain2.size() == 26);
  CHECK(SamplerState::from_bytes(plain2) == plain);
  CHECK(SamplerState::from_bytes(plain.to_bytes()) == plain);

  // Malformed version-2 bytes name what is wrong.
  using Catch::Contains;
  auto bad = v2;
  bad.resize(30);
  CHECK_THROWS_WITH(SamplerState::from_bytes(bad), Contains("bytes record[0] header"));
  bad = v2;
  bad[28] = 5;  // payload size 5 > 4 bytes left
  CHECK_THROWS_WITH(SamplerState::from_bytes(bad), Contains("bytes record[0] size = 5"));
  bad = v2;
  bad[26] = 77;  // unknown tag
  CHECK_THROWS_WITH(SamplerState::from_bytes(bad), Contains("bytes record[0] tag = 77"));
  bad = v2;
  bad[24] = 2;  // two records, the second a copy of the first
  bad.insert(bad.end(), v2.begin() + 26, v2.end());
  CHECK_THROWS_WITH(SamplerState::from_bytes(bad), Contains("appears twice"));
  bad = v2;
  bad.push_back(0);
  CHECK_THROWS_WITH(SamplerState::from_bytes(bad), Contains("bytes.size() = 37"));
  bad = v2;
  bad[6] = 2;  // version 2 has one flag
  CHECK_THROWS_WITH(SamplerState::from_bytes(bad), Contains("flags"));
  bad = v2;
  bad[28] = 3;  // a 3-byte Mirostat record
  bad.pop_back();
  CHECK_THROWS_WITH(SamplerState::from_bytes(bad), Contains("mirostat record size = 3"));
  CHECK_THROWS_WITH(SamplerState::from_bytes(std::vector<std::uint8_t>(v2.begin(), v2.begin() + 20)),
                    Contains("bytes.size() = 20"));
  CHECK_THROWS_WITH(state.to_bytes(3), Contains("version = 3"));
}
