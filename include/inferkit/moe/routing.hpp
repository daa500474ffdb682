#pragma once
// The routing of one MoE layer call: which experts each token's slots go to, with which weight.
// Produced by route() / route_expert_choice() (moe/router.hpp), edited by apply_capacity()
// (moe/capacity.hpp), consumed by DispatchPlan (moe/dispatch.hpp). A plain struct, so callers
// (and the distributed layer) may also fill one themselves.
//
// Layout (CSR by token): token t owns slots [token_offsets[t], token_offsets[t + 1]).
// Token-choice routing gives every token top_k slots in rank order (best expert first);
// expert-choice routing gives a token one slot per expert that chose it, in expert-id order.
// A slot whose expert id is kDroppedExpert was dropped by capacity: it contributes nothing.
// The vectors are reused across calls (resized, never shrunk), so routing a batch of the same
// shape again allocates nothing.

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "inferkit/core/view.hpp"

namespace inferkit {

/// Expert id of a slot dropped by capacity (it contributes nothing; the residual carries the token).
inline constexpr std::int32_t kDroppedExpert = -1;

/// The routing decisions of one call over T tokens and E experts (see the file comment for the layout).
struct Routing {
  Index num_tokens = 0;                  ///< T
  Index num_experts = 0;                 ///< E
  Index top_k = 0;                       ///< slots per token for token-choice routing; 0 for expert choice
  std::vector<Index> token_offsets;      ///< [T + 1]; token t's slots are [token_offsets[t], token_offsets[t + 1])
  std::vector<std::int32_t> expert_ids;  ///< [slots]; expert of each slot, or kDroppedExpert
  std::vector<float> weights;            ///< [slots]; combine weight of each slot (kept when dropped, unused)
  /// [E]; P_e: the mean over tokens of each expert's router probability (softmax over all E
  /// logits; for sigmoid scoring the sigmoid scores normalized to sum 1 per token, as
  /// DeepSeek-V3's balance loss), summed in double in token order. Input of the auxiliary loss.
  std::vector<double> mean_probability;
  /// ST-MoE router z-loss (Zoph et al. 2022, eq. 5): mean over tokens of logsumexp(logits_t)^2.
  double z_loss = 0.0;

  /// Number of slots (kept and dropped).
  Index num_slots() const { return static_cast<Index>(expert_ids.size()); }
  /// The slots of token t: [first, last).
  std::pair<Index, Index> slots(Index t) const { return {token_offsets[t], token_offsets[t + 1]}; }
};

}  // namespace inferkit
