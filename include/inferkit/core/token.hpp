#pragma once
// TokenId: the one integer type for vocabulary ids, shared by every layer that handles tokens
// (sampling, kv's prefix trie, serving, tokenizer, grammar).
//
//   const inferkit::TokenId eos = 2;

#include <cstdint>

namespace inferkit {

/// A vocabulary index; valid ids are >= 0 (a negative id means "none" where a field says so).
using TokenId = std::int32_t;

}  // namespace inferkit
