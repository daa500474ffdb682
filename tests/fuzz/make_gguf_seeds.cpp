// Writes the seed corpora of fuzz_gguf (small GGUF files written by inferkit's GgufWriter, and
// truncations of them), fuzz_tokenizer and fuzz_detokenizer into tests/fuzz/corpus/<target>/.
// Build and run from the repository root:
//   g++ -std=c++20 -Iinclude tests/fuzz/make_gguf_seeds.cpp -o /tmp/make_gguf_seeds && /tmp/make_gguf_seeds

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "inferkit/io/gguf_writer.hpp"

namespace {

void save(const std::string& target, const std::string& name, const void* data, std::size_t n) {
  std::ofstream o("tests/fuzz/corpus/" + target + "/" + name, std::ios::binary);
  o.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}
void save(const std::string& target, const std::string& name, const std::vector<std::byte>& b) {
  save(target, name, b.data(), b.size());
}
void save(const std::string& target, const std::string& name, const std::string& s) {
  save(target, name, s.data(), s.size());
}

// A string literal with its embedded NUL bytes.
template <std::size_t N>
std::string lit(const char (&s)[N]) {
  return std::string(s, N - 1);
}

}  // namespace

int main() {
  using inferkit::GgmlType;
  using inferkit::GgufArray;
  using inferkit::GgufValue;
  using inferkit::GgufWriter;
  const std::vector<float> f32 = {1, -2, 0.5f, 3, 4, 5};
  std::vector<std::byte> q8(34);
  for (std::size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<std::byte>(i);
  const std::vector<inferkit::Float16> f16 = {{0x3C00}, {0x4000}, {0xC200}, {0}};
  std::vector<std::byte> iq(66, std::byte{7});  // an IQ2_XXS block

  GgufWriter all;
  all.set<std::uint8_t>("u8", 1);
  all.set<std::int8_t>("i8", -1);
  all.set<std::uint16_t>("u16", 2);
  all.set<std::int16_t>("i16", -2);
  all.set<std::uint32_t>("u32", 3);
  all.set<std::int32_t>("i32", -3);
  all.set<float>("f32", 1.5f);
  all.set<bool>("b", true);
  all.set("s", "text");
  all.set<std::uint64_t>("u64", 4);
  all.set<std::int64_t>("i64", -4);
  all.set<double>("f64", 2.5);
  all.set("arr.s", GgufValue::of(GgufArray::of_strings(std::vector<std::string>{"a", "", "b c"})));
  all.set("arr.i32", GgufValue::of(GgufArray::of(std::vector<std::int32_t>{1, 2, 3})));
  all.add_tensor<float>("w", {3, 2}, f32);
  all.add_tensor("q", GgmlType::kQ8_0, {32}, q8);
  all.add_tensor<inferkit::Float16>("h", {4}, f16);
  const auto all_bytes = all.to_bytes();
  save("fuzz_gguf", "all_types", all_bytes);
  for (std::size_t cut :
       {std::size_t{3}, std::size_t{20}, std::size_t{60}, all_bytes.size() / 2, all_bytes.size() - 40})
    save("fuzz_gguf", "all_types_cut" + std::to_string(cut), all_bytes.data(), cut);

  GgufWriter v2(2);
  v2.set<std::uint32_t>("general.alignment", 64);
  v2.add_tensor<float>("a", {2}, std::vector<float>{1, 2});
  v2.add_tensor("iq", GgmlType::kI8, {66}, std::span<const std::byte>(iq));
  auto v2_bytes = v2.to_bytes();
  // Retype "iq" as IQ2_XXS (a type without a known layout), which the writer cannot add itself:
  // its info is name, n_dims 1, dim 66, type I8 (24).
  const std::string needle = lit("\x02\0\0\0\0\0\0\0iq\x01\0\0\0\x42\0\0\0\0\0\0\0\x18");
  const std::string hay(reinterpret_cast<const char*>(v2_bytes.data()), v2_bytes.size());
  const std::size_t at = hay.find(needle);
  if (at != std::string::npos) v2_bytes[at + needle.size() - 1] = std::byte{16};
  save("fuzz_gguf", "v2_align64_iq", v2_bytes);

  // SentencePiece vocabulary: control tokens, a few pieces with scores, byte fallback for 'a'..'c'.
  GgufWriter spm;
  spm.set("tokenizer.ggml.model", "llama");
  const std::vector<std::string> sp = {"<unk>",
                                       "<s>",
                                       "</s>",
                                       "\xE2\x96\x81",
                                       "a",
                                       "b",
                                       "\xE2\x96\x81"
                                       "a",
                                       "ab",
                                       "<0x61>",
                                       "<0x62>",
                                       "<0x63>"};
  spm.set("tokenizer.ggml.tokens", GgufValue::of(GgufArray::of_strings(sp)));
  spm.set("tokenizer.ggml.scores",
          GgufValue::of(GgufArray::of(std::vector<float>{0, 0, 0, -1, -2, -2, -0.5f, -0.7f, 0, 0, 0})));
  spm.set("tokenizer.ggml.token_type",
          GgufValue::of(GgufArray::of(std::vector<std::int32_t>{2, 3, 3, 1, 1, 1, 1, 1, 6, 6, 6})));
  spm.set<std::uint32_t>("tokenizer.ggml.bos_token_id", 1);
  spm.set<std::uint32_t>("tokenizer.ggml.eos_token_id", 2);
  spm.set<std::uint32_t>("tokenizer.ggml.unknown_token_id", 0);
  save("fuzz_gguf", "vocab_spm", spm.to_bytes());

  // Byte-level BPE vocabulary with merges.
  GgufWriter bpe;
  bpe.set("tokenizer.ggml.model", "gpt2");
  bpe.set("tokenizer.ggml.pre", "gpt-2");
  const std::vector<std::string> bp = {"a",
                                       "b",
                                       "c",
                                       "\xC4\xA0",
                                       "ab",
                                       "\xC4\xA0"
                                       "a",
                                       "<|endoftext|>"};
  bpe.set("tokenizer.ggml.tokens", GgufValue::of(GgufArray::of_strings(bp)));
  bpe.set("tokenizer.ggml.token_type", GgufValue::of(GgufArray::of(std::vector<std::int32_t>{1, 1, 1, 1, 1, 1, 3})));
  bpe.set("tokenizer.ggml.merges", GgufValue::of(GgufArray::of_strings(std::vector<std::string>{"a b", "\xC4\xA0 a"})));
  bpe.set<std::uint32_t>("tokenizer.ggml.eos_token_id", 6);
  save("fuzz_gguf", "vocab_bpe", bpe.to_bytes());

  // fuzz_tokenizer: byte 0 even = a pattern then a text; odd = a vocabulary then a text.
  save("fuzz_tokenizer", "regex_gpt2", lit("\x00 ?\\\\p{L}+|\\\\s+(?!\\\\S)\\x Hello  world 123 !!"));
  save("fuzz_tokenizer", "regex_class", lit("\x02[^\\\\s\\\\p{N}]{1,3}\\x\xC3\xA9t\xC3\xA9 42\xFF"));
  save("fuzz_tokenizer", "vocab_spm",
       lit("\x01\x01\x01\x00\x08"
           "ab\\x\x01"
           "cd\\x\x02"
           "abc def \xE2\x96\x81 z"));
  save("fuzz_tokenizer", "vocab_bpe",
       lit("\x01\x00\x01\x02\x10"
           " a\\x\x01"
           "bc\\x\x03"
           "a bc  abc\n\nx'sy"));
  // fuzz_detokenizer: pieces then an id stream.
  save("fuzz_detokenizer", "bytes", lit("\x02\xC3\xA9\\x\x01 a\\x\x00\x01\x01\x00\xE5\xE4\x03\x04\x05\x40\x41\x42"));
  save("fuzz_detokenizer", "plain", lit("\x00\x00\x01\x10\x20\x30\x40\x50\x60\x70\x80\x90\xA0\xB0\xC0\xD0\xE0\xF0"));
  std::puts("seeds written");
}
