#pragma once
// The per-request state of a SamplerChain's stateful rules, explicit so that the caller owns it:
//   generated   tokens accepted since the prompt (min_new_tokens, the exponential decay length
//               penalty and begin-suppress tokens read it);
//   the pending draw: the token the last sample() drew and its surprise (bits) under the
//               distribution it was drawn from, held until accept() commits it;
//   rule states: one per registered rule that keeps its own (a rule with a `State` type,
//               decoding_rule.hpp; today Mirostat's mu, MirostatState), present when the chain
//               has that rule. The list of types comes from the registry (processor.hpp): a new
//               rule with a State gets its slot here without this file changing.
// Life cycle (llama.cpp's apply / accept split):
//   SamplerState s = chain.make_state();             // at admission (generated = 0, mu = 2 tau)
//   t = chain.sample(logits, history, s, rng, i);    // applies the rules, draws, records t
//   chain.accept(s, t);                              // generated += 1; each rule's accept()
// accept() of a token the chain did not just draw (a forced or verified token) counts it and
// tells the rules it was not drawn (Mirostat then leaves mu alone: its surprise is unknown).
// The state is a value type: copy it to fork a beam or to roll back speculative tokens, compare
// it with ==, and serialize it with to_bytes() / from_bytes() when a scheduler preempts the
// request. Token history is not part of it: rules that read the history get it from the caller
// at every step.
//
// Serialized form (little-endian; from_bytes() reads both versions, to_bytes() writes the oldest
// that holds the state, so every state of a chain without new stateful rules stays version 1):
//   version 1, 28 bytes: "IKSS", version (u16 = 1), flags (u16: bit 0 Mirostat's mu present,
//     bit 1 a pending draw), generated (i64), mu (f32), pending token (i32), its surprise (f32).
//   version 2: "IKSS", version (u16 = 2), flags (u16: bit 0 a pending draw), generated (i64),
//     pending token (i32), its surprise (f32), record count (u16), then per rule state present,
//     in registration order: tag (u16, the state's kTag), payload size (u32), payload (its
//     write()). Mirostat's record is tag 1, mu as f32.

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/detail/bytes.hpp"
#include "inferkit/sampling/logits.hpp"
#include "inferkit/sampling/mirostat.hpp"
#include "inferkit/sampling/processor.hpp"

namespace inferkit {

class SamplerChain;

/// Per-request state of a SamplerChain (see the header comment). Copyable, comparable,
/// serializable; not thread-safe (one request, one writer).
class SamplerState {
 public:
  /// Size of a version-1 state (to_bytes() of every state holding no rule state but Mirostat's).
  static constexpr std::size_t kSerializedSize = 28;
  /// The newest format version from_bytes() reads and to_bytes(version) writes.
  static constexpr std::uint16_t kFormatVersion = 2;

  /// A state with nothing generated and no rule states (use SamplerChain::make_state()).
  SamplerState() = default;

  /// Tokens accepted since the prompt.
  Index generated() const noexcept { return generated_; }
  /// True when the state carries Mirostat's mu.
  bool has_mirostat_mu() const noexcept { return rule_state<MirostatState>() != nullptr; }
  /// Mirostat's mu in bits; throws std::invalid_argument when the state has none.
  float mirostat_mu() const {
    const MirostatState* m = rule_state<MirostatState>();
    require(m != nullptr, "state.mirostat_mu", "none", "this state was not made for a chain with a mirostat stage");
    return m->mu;
  }
  /// The token drawn by the last sample() and not yet accepted, or -1.
  TokenId pending_token() const noexcept { return has_drawn_ ? drawn_ : -1; }

  /// The state of the registered rule whose State type is S, or null when this state holds none.
  template <class S>
  const S* rule_state() const noexcept {
    const std::optional<S>& s = std::get<std::optional<S>>(states_);
    return s ? &*s : nullptr;
  }

  /// The state as bytes in the oldest format version that holds it (header comment).
  std::vector<std::uint8_t> to_bytes() const { return to_bytes(only_version_1_states() ? 1 : 2); }

  /// The state as bytes in format `version` (1 or 2); throws std::invalid_argument for another
  /// version, or for 1 when the state holds a rule state version 1 has no field for.
  std::vector<std::uint8_t> to_bytes(std::uint16_t version) const {
    require(version == 1 || version == 2, "version", version, "must be 1 or 2");
    if (version == 1)
      require(only_version_1_states(), "version", version,
              "cannot hold this state's rule states (version 1 holds Mirostat's mu only): use version 2");
    std::vector<std::uint8_t> b{'I', 'K', 'S', 'S'};
    detail::append_le(b, version, 2);
    if (version == 1) {
      const MirostatState* m = rule_state<MirostatState>();
      detail::append_le(b, (m ? 1u : 0u) | (has_drawn_ ? 2u : 0u), 2);
      detail::append_le(b, static_cast<std::uint64_t>(generated_), 8);
      detail::append_le(b, std::bit_cast<std::uint32_t>(m ? m->mu : 0.0f), 4);
      append_pending(b);
      return b;
    }
    detail::append_le(b, has_drawn_ ? 1u : 0u, 2);
    detail::append_le(b, static_cast<std::uint64_t>(generated_), 8);
    append_pending(b);
    const std::size_t count_at = b.size();
    detail::append_le(b, 0, 2);
    std::uint16_t count = 0;
    std::apply(
        [&](const auto&... s) {
          const auto record = [&](const auto& state) {
            if (!state) return;
            detail::append_le(b, state->kTag, 2);
            const std::size_t size_at = b.size();
            detail::append_le(b, 0, 4);
            state->write(b);
            const std::uint64_t size = b.size() - size_at - 4;
            for (int i = 0; i < 4; ++i) b[size_at + std::size_t(i)] = static_cast<std::uint8_t>(size >> (8 * i));
            ++count;
          };
          (record(s), ...);
        },
        states_);
    b[count_at] = static_cast<std::uint8_t>(count);
    b[count_at + 1] = static_cast<std::uint8_t>(count >> 8);
    return b;
  }

  /// Reads a state written by to_bytes() (either version); throws std::invalid_argument naming
  /// the field that is malformed (size, magic, version, flags, a record, or an out-of-range
  /// value).
  static SamplerState from_bytes(std::span<const std::uint8_t> b) {
    require(b.size() >= 6, "bytes.size()", b.size(), "must be >= 6 (magic and version)");
    require(b[0] == 'I' && b[1] == 'K' && b[2] == 'S' && b[3] == 'S', "bytes[0..4) (magic)", int(b[0]),
            "must be \"IKSS\"");
    const auto version = static_cast<std::uint16_t>(detail::read_le(b, 4, 2));
    require(version == 1 || version == 2, "bytes version", version, "must be 1 or 2");
    SamplerState s;
    if (version == 1) {
      require(b.size() == kSerializedSize, "bytes.size()", b.size(),
              "must be " + std::to_string(kSerializedSize) + " for version 1");
      const auto flags = static_cast<std::uint16_t>(detail::read_le(b, 6, 2));
      require((flags & ~3u) == 0, "bytes flags", flags, "must use bits 0-1 only");
      s.has_drawn_ = (flags & 2u) != 0;
      s.generated_ = static_cast<Index>(detail::read_le(b, 8, 8));
      if (flags & 1u) s.set_rule_state(MirostatState::read(b.subspan(16, 4)));
      s.read_pending(b, 20);
    } else {
      require(b.size() >= kVersion2Fixed, "bytes.size()", b.size(),
              "must be >= " + std::to_string(kVersion2Fixed) + " for version 2");
      const auto flags = static_cast<std::uint16_t>(detail::read_le(b, 6, 2));
      require((flags & ~1u) == 0, "bytes flags", flags, "must use bit 0 only (version 2)");
      s.has_drawn_ = (flags & 1u) != 0;
      s.generated_ = static_cast<Index>(detail::read_le(b, 8, 8));
      s.read_pending(b, 16);
      s.read_records(b);
    }
    require(s.generated_ >= 0, "bytes generated", s.generated_, "must be >= 0");
    return s;
  }

  /// Equal when every field is (a deserialized state equals its source).
  friend bool operator==(const SamplerState&, const SamplerState&) = default;

 private:
  friend class SamplerChain;

  /// Fixed part of a version-2 state (before its records).
  static constexpr std::size_t kVersion2Fixed = 26;

  template <class S>
  S& rule_state_mut() {
    return *std::get<std::optional<S>>(states_);
  }
  template <class S>
  void set_rule_state(S s) {
    std::get<std::optional<S>>(states_) = std::move(s);
  }

  /// Bit i set when the state holds the i-th type of RuleStateTypes.
  std::uint64_t held_states() const noexcept {
    return std::apply(
        [](const auto&... s) {
          std::uint64_t m = 0, bit = 1;
          ((m |= (s ? bit : 0), bit <<= 1), ...);
          return m;
        },
        states_);
  }
  bool only_version_1_states() const noexcept {
    return (held_states() & ~(std::uint64_t{1} << kRuleStateIndex<MirostatState>)) == 0;
  }

  void append_pending(std::vector<std::uint8_t>& b) const {
    detail::append_le(b, static_cast<std::uint32_t>(drawn_), 4);
    detail::append_le(b, std::bit_cast<std::uint32_t>(drawn_surprise_), 4);
  }
  void read_pending(std::span<const std::uint8_t> b, std::size_t at) {
    drawn_ = static_cast<TokenId>(static_cast<std::uint32_t>(detail::read_le(b, at, 4)));
    drawn_surprise_ = std::bit_cast<float>(static_cast<std::uint32_t>(detail::read_le(b, at + 4, 4)));
    if (!has_drawn_) {  // fields without their flag carry no information
      drawn_ = -1;
      drawn_surprise_ = 0.0f;
    }
    require(!has_drawn_ || drawn_ >= 0, "bytes pending token", drawn_, "must be >= 0");
    require(!has_drawn_ || (std::isfinite(drawn_surprise_) && drawn_surprise_ >= 0.0f), "bytes surprise",
            drawn_surprise_, "must be finite and >= 0");
  }

  /// Version 2's records: each tag names a registered state type, at most once.
  void read_records(std::span<const std::uint8_t> b) {
    const auto count = static_cast<std::size_t>(detail::read_le(b, kVersion2Fixed - 2, 2));
    std::size_t at = kVersion2Fixed;
    for (std::size_t r = 0; r < count; ++r) {
      const auto name = [r](const char* what) { return "bytes record[" + std::to_string(r) + "] " + what; };
      require(b.size() - at >= 6, name("header"), b.size() - at, "bytes left: a record header needs 6");
      const auto tag = static_cast<std::uint16_t>(detail::read_le(b, at, 2));
      const std::uint64_t size = detail::read_le(b, at + 2, 4);
      at += 6;
      require(size <= b.size() - at, name("size"), size,
              "exceeds the " + std::to_string(b.size() - at) + " bytes left");
      const auto payload = b.subspan(at, static_cast<std::size_t>(size));
      bool known = false;
      std::apply(
          [&](auto&... s) {
            const auto read = [&](auto& slot) {
              using S = typename std::decay_t<decltype(slot)>::value_type;
              if (tag != S::kTag) return;
              require(!slot, name("tag"), tag, "appears twice");
              slot = S::read(payload);
              known = true;
            };
            (read(s), ...);
          },
          states_);
      require(known, name("tag"), tag, "names no registered rule state");
      at += static_cast<std::size_t>(size);
    }
    require(at == b.size(), "bytes.size()", b.size(), "must be " + std::to_string(at) + " (where the records end)");
  }

  Index generated_ = 0;
  bool has_drawn_ = false;
  TokenId drawn_ = -1;
  float drawn_surprise_ = 0.0f;
  RuleStates states_{};
};

}  // namespace inferkit
