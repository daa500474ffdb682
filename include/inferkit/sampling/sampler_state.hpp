#pragma once
// The per-request state of a SamplerChain's stateful rules, explicit so that the caller owns it:
//   generated   tokens accepted since the prompt (min_new_tokens, the exponential decay length
//               penalty and begin-suppress tokens read it);
//   mu          Mirostat's controller state, present when the chain has a Mirostat stage;
//   the pending draw: the token the last sample() drew and its surprise (bits) under the
//               distribution it was drawn from, held until accept() commits it.
// Life cycle (llama.cpp's apply / accept split):
//   SamplerState s = chain.make_state();             // at admission (generated = 0, mu = 2 tau)
//   t = chain.sample(logits, history, s, rng, i);    // applies the rules, draws, records t
//   chain.accept(s, t);                              // generated += 1; Mirostat's mu update
// accept() of a token the chain did not just draw (a forced or verified token) counts it but
// leaves mu alone: its surprise under Mirostat's distribution is unknown.
// The state is a small value type: copy it to fork a beam or to roll back speculative tokens,
// compare it with ==, and serialize it with to_bytes() / from_bytes() (28 bytes, little-endian,
// versioned) when a scheduler preempts the request. Token history is not part of it: rules that
// read the history get it from the caller at every step.

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

class SamplerChain;

/// Per-request state of a SamplerChain (see the header comment). Copyable, comparable,
/// serializable; not thread-safe (one request, one writer).
class SamplerState {
 public:
  /// Size of to_bytes()' output.
  static constexpr std::size_t kSerializedSize = 28;
  /// Format version written by to_bytes().
  static constexpr std::uint16_t kFormatVersion = 1;

  /// A state with nothing generated and no Mirostat mu (use SamplerChain::make_state()).
  SamplerState() = default;

  /// Tokens accepted since the prompt.
  Index generated() const noexcept { return generated_; }
  /// True when the state carries Mirostat's mu.
  bool has_mirostat_mu() const noexcept { return has_mu_; }
  /// Mirostat's mu in bits; throws std::invalid_argument when the state has none.
  float mirostat_mu() const {
    require(has_mu_, "state.mirostat_mu", "none", "this state was not made for a chain with a mirostat stage");
    return mu_;
  }
  /// The token drawn by the last sample() and not yet accepted, or -1.
  TokenId pending_token() const noexcept { return has_drawn_ ? drawn_ : -1; }

  /// The state as 28 little-endian bytes: "IKSS", version (u16), flags (u16), generated (i64),
  /// mu (f32), pending token (i32), its surprise (f32).
  std::vector<std::uint8_t> to_bytes() const {
    std::vector<std::uint8_t> b(kSerializedSize);
    b[0] = 'I';
    b[1] = 'K';
    b[2] = 'S';
    b[3] = 'S';
    put(b, 4, kFormatVersion, 2);
    put(b, 6, static_cast<std::uint16_t>((has_mu_ ? 1u : 0u) | (has_drawn_ ? 2u : 0u)), 2);
    put(b, 8, static_cast<std::uint64_t>(generated_), 8);
    put(b, 16, std::bit_cast<std::uint32_t>(mu_), 4);
    put(b, 20, static_cast<std::uint32_t>(drawn_), 4);
    put(b, 24, std::bit_cast<std::uint32_t>(drawn_surprise_), 4);
    return b;
  }

  /// Reads a state written by to_bytes(); throws std::invalid_argument naming the field that is
  /// malformed (size, magic, version, flags, or an out-of-range value).
  static SamplerState from_bytes(std::span<const std::uint8_t> b) {
    require(b.size() == kSerializedSize, "bytes.size()", b.size(), "must be " + std::to_string(kSerializedSize));
    require(b[0] == 'I' && b[1] == 'K' && b[2] == 'S' && b[3] == 'S', "bytes[0..4) (magic)", int(b[0]),
            "must be \"IKSS\"");
    const auto version = static_cast<std::uint16_t>(get(b, 4, 2));
    require(version == kFormatVersion, "bytes version", version, "must be " + std::to_string(kFormatVersion));
    const auto flags = static_cast<std::uint16_t>(get(b, 6, 2));
    require((flags & ~3u) == 0, "bytes flags", flags, "must use bits 0-1 only");
    SamplerState s;
    s.has_mu_ = (flags & 1u) != 0;
    s.has_drawn_ = (flags & 2u) != 0;
    s.generated_ = static_cast<Index>(get(b, 8, 8));
    s.mu_ = std::bit_cast<float>(static_cast<std::uint32_t>(get(b, 16, 4)));
    s.drawn_ = static_cast<TokenId>(static_cast<std::uint32_t>(get(b, 20, 4)));
    s.drawn_surprise_ = std::bit_cast<float>(static_cast<std::uint32_t>(get(b, 24, 4)));
    if (!s.has_mu_) s.mu_ = 0.0f;  // fields without their flag carry no information
    if (!s.has_drawn_) {
      s.drawn_ = -1;
      s.drawn_surprise_ = 0.0f;
    }
    require(s.generated_ >= 0, "bytes generated", s.generated_, "must be >= 0");
    require(!s.has_mu_ || std::isfinite(s.mu_), "bytes mu", s.mu_, "must be finite");
    require(!s.has_drawn_ || s.drawn_ >= 0, "bytes pending token", s.drawn_, "must be >= 0");
    require(!s.has_drawn_ || (std::isfinite(s.drawn_surprise_) && s.drawn_surprise_ >= 0.0f), "bytes surprise",
            s.drawn_surprise_, "must be finite and >= 0");
    return s;
  }

  /// Equal when every field is (a deserialized state equals its source).
  friend bool operator==(const SamplerState&, const SamplerState&) = default;

 private:
  friend class SamplerChain;

  static void put(std::vector<std::uint8_t>& b, std::size_t at, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  static std::uint64_t get(std::span<const std::uint8_t> b, std::size_t at, int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{b[at + static_cast<std::size_t>(i)]} << (8 * i);
    return v;
  }

  Index generated_ = 0;
  bool has_mu_ = false;
  bool has_drawn_ = false;
  float mu_ = 0.0f;
  TokenId drawn_ = -1;
  float drawn_surprise_ = 0.0f;
};

}  // namespace inferkit
