#pragma once
// A generation request as the serving scheduler sees it: its prompt, how long it may generate,
// when it stops, and the sampling state it needs (seed). Stop rules, checked after every
// generated token in this order:
//   1. an end-of-sequence id (any of `eos_token_ids`): the id is kept in the output, as Hugging
//      Face generate() and vLLM return it;
//   2. a stop token sequence (the first of `stop_sequences`, in list order, that the generated
//      tokens end with; it must lie within the generated tokens, never reach into the prompt):
//      dropped from the output unless `keep_stop_sequence`. vLLM drops stop strings by default
//      (`include_stop_str_in_output = False`); Hugging Face's StopStringCriteria keeps them (its
//      generate() returns every generated token), so `keep_stop_sequence = true` reproduces HF;
//   3. `max_new_tokens` generated tokens (reported as a length stop only when 1 and 2 do not
//      hold for the same token).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/prefix_trie.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

/// Identifies a request inside one scheduler (assigned by add_request(), never reused).
using RequestId = std::int64_t;

/// Why a request stopped generating.
enum class FinishReason {
  kEos,           ///< it generated one of its end-of-sequence ids (kept in the output)
  kStopSequence,  ///< its generated tokens ended with one of its stop sequences
  kLength,        ///< it generated max_new_tokens tokens
};

/// Name of a finish reason ("eos", "stop_sequence", "length").
inline const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kLength:
      return "length";
  }
  return "?";
}

/// What a request asks for (designated initializers; validated by Scheduler::add_request()).
struct RequestParams {
  std::vector<TokenId> prompt{};                       ///< prompt token ids (at least one, all >= 0)
  Index max_new_tokens = 16;                           ///< tokens to generate at most (>= 1)
  std::vector<TokenId> eos_token_ids{};                ///< generating any of these stops (kept in the output)
  std::vector<std::vector<TokenId>> stop_sequences{};  ///< generating any of these stops (each non-empty)
  bool keep_stop_sequence = false;  ///< keep a matched stop sequence in the output (HF) or drop it (vLLM, default)
  std::uint64_t seed = 0;           ///< sampling seed: token i is draw i of CounterRng(seed)
  ContextIdentity identity{};       ///< model / adapter / config fingerprint for prefix reuse
};

/// A stop rule that holds after the last generated token.
struct StopMatch {
  FinishReason reason = FinishReason::kLength;  ///< which rule holds
  Index trim = 0;            ///< trailing generated tokens to drop from the output (a dropped stop sequence)
  Index stop_sequence = -1;  ///< index into stop_sequences for kStopSequence, else -1
};

/// Validates the stop rules and limits of `p` (not the prompt's fit into a pool, which the
/// scheduler checks). Throws std::invalid_argument naming the first bad field.
inline void validate_request(const RequestParams& p) {
  require(!p.prompt.empty(), "prompt.size()", p.prompt.size(),
          "must be >= 1 (the last prompt token produces the first logits)");
  for (std::size_t i = 0; i < p.prompt.size(); ++i)
    if (p.prompt[i] < 0)
      throw_invalid_argument("prompt[" + std::to_string(i) + "]", p.prompt[i], "token ids must be >= 0");
  require(p.max_new_tokens >= 1, "max_new_tokens", p.max_new_tokens, "must be >= 1");
  require(p.max_new_tokens <= (Index{1} << 30) && static_cast<Index>(p.prompt.size()) <= (Index{1} << 30),
          "max_new_tokens", p.max_new_tokens, "prompt and max_new_tokens must each be <= 2^30 (positions are 32-bit)");
  for (std::size_t i = 0; i < p.eos_token_ids.size(); ++i)
    if (p.eos_token_ids[i] < 0)
      throw_invalid_argument("eos_token_ids[" + std::to_string(i) + "]", p.eos_token_ids[i], "token ids must be >= 0");
  for (std::size_t s = 0; s < p.stop_sequences.size(); ++s) {
    const std::string name = "stop_sequences[" + std::to_string(s) + "]";
    require(!p.stop_sequences[s].empty(), name + ".size()", 0, "a stop sequence must hold at least one token");
    for (std::size_t i = 0; i < p.stop_sequences[s].size(); ++i)
      if (p.stop_sequences[s][i] < 0)
        throw_invalid_argument(name + "[" + std::to_string(i) + "]", p.stop_sequences[s][i], "token ids must be >= 0");
  }
}

/// The stop rule (if any) that holds once `generated` (every token generated so far, the last
/// one new) has been produced under `p`. O(total stop-sequence length) per call.
inline std::optional<StopMatch> check_stop(const RequestParams& p, std::span<const TokenId> generated) {
  if (generated.empty()) return std::nullopt;
  const TokenId last = generated.back();
  for (TokenId e : p.eos_token_ids)
    if (e == last) return StopMatch{FinishReason::kEos, 0, -1};
  for (std::size_t s = 0; s < p.stop_sequences.size(); ++s) {
    const auto& seq = p.stop_sequences[s];
    if (seq.size() > generated.size()) continue;
    if (std::equal(seq.rbegin(), seq.rend(), generated.rbegin()))
      return StopMatch{FinishReason::kStopSequence, p.keep_stop_sequence ? 0 : static_cast<Index>(seq.size()),
                       static_cast<Index>(s)};
  }
  if (static_cast<Index>(generated.size()) >= p.max_new_tokens) return StopMatch{FinishReason::kLength, 0, -1};
  return std::nullopt;
}

/// A request that stopped: what the caller returns to its client.
struct FinishedRequest {
  RequestId id = -1;                            ///< its id from add_request()
  FinishReason reason = FinishReason::kLength;  ///< the stop rule that ended it
  Index stop_sequence = -1;                     ///< which stop sequence matched (kStopSequence), else -1
  std::vector<TokenId> output;                  ///< generated tokens, without a dropped stop sequence
  Index generated_tokens = 0;                   ///< tokens generated, including a dropped stop sequence
  Index prompt_tokens = 0;                      ///< prompt length
  Index preemptions = 0;                        ///< times it was preempted and recomputed
};

}  // namespace inferkit
