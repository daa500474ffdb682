// Fuzzes the llama2.c example's readers from memory: the checkpoint loader (Model::load) and the
// tokenizer.bin reader (Tokenizer::load), then encode() / decode() on what loaded.
// Invariants: a checkpoint that loads saves back to the same bytes; every id encode() returns
// is in the vocabulary; decode() of an id in range does not throw.
// Input: byte 0 selects the reader (even: checkpoint, odd: tokenizer). A checkpoint is the rest
// of the input; for the tokenizer the rest goes through FuzzedDataProvider: the vocabulary size
// (0..1023, from the last two bytes), a text to encode (from the front, ended by a backslash and
// one more byte), then the file (make_llama2c_seeds.py writes seeds in this layout).

#include <sstream>
#include <string>

#include "fuzz_util.hpp"
#include "llama2c/llama2c.hpp"
#include "llama2c/tokenizer.hpp"

namespace {

void fuzz_checkpoint(const std::string& bytes) {
  std::istringstream in(bytes, std::ios::binary);
  std::optional<llama2c::Model> m;
  if (!fuzz::ok([&] { m.emplace(llama2c::Model::load(in, "fuzz", /*allow_moe=*/true)); })) return;
  std::ostringstream out(std::ios::binary);
  m->save(out);
  FUZZ_CHECK(out.str() == bytes);
}

void fuzz_tokenizer(FuzzedDataProvider& fdp) {
  const int vocab = fdp.ConsumeIntegralInRange<int>(0, 1023);
  const std::string text = fdp.ConsumeRandomLengthString(256);
  const std::string file = fdp.ConsumeRemainingBytesAsString();
  std::istringstream in(file, std::ios::binary);
  std::optional<llama2c::Tokenizer> t;
  if (!fuzz::ok([&] { t.emplace(llama2c::Tokenizer::load(in, vocab, "fuzz")); })) return;
  FUZZ_CHECK(t->vocab_size() == vocab);
  std::vector<inferkit::TokenId> ids;
  if (!fuzz::ok([&] { ids = t->encode(text); })) return;
  inferkit::TokenId prev = 1;
  for (const inferkit::TokenId id : ids) {
    FUZZ_CHECK(id >= 0 && id < vocab);
    (void)t->decode(prev, id);  // in range: must not throw
    prev = id;
  }
  fuzz::ok([&] { (void)t->decode(prev, static_cast<inferkit::TokenId>(vocab)); });  // out of range: documented
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    fuzz_checkpoint(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  } else {
    FuzzedDataProvider fdp(data + 1, size - 1);
    fuzz_tokenizer(fdp);
  }
  return 0;
}
