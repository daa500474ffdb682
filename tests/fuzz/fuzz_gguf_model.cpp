// Fuzzes the runner's GGUF model loader (examples/llama2c/gguf_model.hpp: Model::from_gguf, both
// the ggml-backed zero-copy path and the float copy) with arbitrary bytes, then a forward pass
// of what loads.
// Invariants: a file either loads or throws std::invalid_argument / std::out_of_range (an error
// naming the key, tensor or value; libFuzzer's -rss_limit_mb catches an allocation the file's
// size does not justify, e.g. a block_count or context_length that asks for gigabytes); a
// model that loads has the config its header describes and runs a forward pass of two tokens
// without a sanitizer report.
// Seeds: tests/fuzz/corpus/fuzz_gguf_model/, tiny models written by the runner's own
// `make-random --out x.gguf` (F32, F16, BF16) and `quantize` (Q8_0), and truncations of them
// (tests/fuzz/make_gguf_model_seeds.sh).

#include <memory>
#include <optional>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/io/gguf.hpp"
#include "llama2c/llama2c.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  std::shared_ptr<const inferkit::GgufFile> file;
  if (!fuzz::ok([&] { file = std::make_shared<const inferkit::GgufFile>(inferkit::MappedFile::view(bytes, "fuzz")); }))
    return 0;
  std::optional<llama2c::Model> m;
  if (!fuzz::ok([&] { m.emplace(llama2c::Model::from_gguf(file)); })) return 0;
  const llama2c::Config& c = m->config();
  FUZZ_CHECK(c.dim > 0 && c.n_layers > 0 && c.vocab_size > 0 && c.n_heads % c.n_kv_heads == 0);
  FUZZ_CHECK(c.bos < c.vocab_size);
  // Two tokens through the model (the first and the last of the vocabulary); a model whose
  // weights overflow to infinity may give non-finite logits (not an error), never UB.
  const std::vector<inferkit::TokenId> ids = {0, c.vocab_size - 1};
  std::vector<float> logits(2 * static_cast<std::size_t>(c.vocab_size));
  llama2c::Cache cache(c, {});
  fuzz::ok([&] { llama2c::forward(*m, cache, ids.data(), 2, 0, logits.data(), {.batched = true}); });
  return 0;
}
