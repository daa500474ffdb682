// io/gguf_writer.hpp: the writer's bytes against a file assembled by hand from the format's layout
// (gguf_test_util.hpp), read-then-write round trips bit for bit of files other programs wrote
// (stories260K.gguf by llama.cpp's converter, the vocabulary files by gguf-py), and the writer's
// errors.

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf_test_util.hpp"
#include "inferkit/io/gguf.hpp"
#include "inferkit/io/gguf_writer.hpp"

using Catch::Matchers::Contains;
using gguf_test::Bytes;
using inferkit::GgmlType;
using inferkit::GgufArray;
using inferkit::GgufFile;
using inferkit::GgufValue;
using inferkit::GgufWriter;
using inferkit::MappedFile;

namespace {

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

}  // namespace

TEST_CASE("GgufWriter writes the bytes the format's layout prescribes", "[io][gguf_writer]") {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  std::vector<std::byte> q8(34);
  for (std::size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<std::byte>(i * 7);
  const std::vector<inferkit::Float16> h = {{0x3C00}, {0xC000}};

  GgufWriter g(3);
  g.set("general.architecture", std::string("llama"));
  g.set<std::uint32_t>("llama.block_count", 2);
  g.set<std::int8_t>("i8", -1);
  g.set<bool>("flag", true);
  g.set<double>("f64", 0.125);
  g.set("toks", GgufValue::of(GgufArray::of_strings(std::vector<std::string>{"<s>", "a b"})));
  g.set("scores", GgufValue::of(GgufArray::of(std::vector<float>{-1.0f, 0.5f})));
  g.add_tensor<float>("w", {3, 2}, w);
  g.add_tensor("q", GgmlType::kQ8_0, {32}, q8);
  g.add_tensor<inferkit::Float16>("h", {2}, h);

  Bytes b;
  b.header(3, 3, 7);
  b.key("general.architecture", 8).str("llama");
  b.key("llama.block_count", 4).u32(2);
  b.key("i8", 1).u8(0xFF);
  b.key("flag", 7).u8(1);
  b.key("f64", 12).f64(0.125);
  b.key("toks", 9).u32(8).u64(2).str("<s>").str("a b");
  b.key("scores", 9).u32(6).u64(2).f32(-1.0f).f32(0.5f);
  b.tensor("w", {3, 2}, 0, 0).tensor("q", {32}, 8, 32).tensor("h", {2}, 1, 96);
  b.pad(32);
  for (float x : w) b.f32(x);
  b.pad(32);
  b.raw(q8.data(), q8.size()).pad(32);
  b.u16(0x3C00).u16(0xC000).pad(32);

  const auto bytes = g.to_bytes();
  CHECK(same_bytes(bytes, b.b));

  // Read back and written again: the same bytes.
  const GgufFile read_back(MappedFile::from_bytes(bytes));  // from() references its tensor bytes
  GgufWriter g2 = GgufWriter::from(read_back);
  CHECK(same_bytes(g2.to_bytes(), bytes));
}

TEST_CASE("GgufWriter: read, write back, same bytes; edits keep key positions", "[io][gguf_writer]") {
  GgufWriter g(2);
  g.set("a", "x");
  g.set<std::uint64_t>("b", 7);
  g.set<std::uint32_t>("general.alignment", 64);
  const std::vector<std::int32_t> ids = {1, -2, 3};
  g.add_tensor<std::int32_t>("ids", {3}, ids);
  const auto first = g.to_bytes();
  const GgufFile f(MappedFile::from_bytes(first));
  CHECK(f.version() == 2);
  CHECK(f.alignment() == 64);
  CHECK(f.data_offset() % 64 == 0);
  CHECK(f.tensor("ids").values<std::int32_t>()[1] == -2);
  GgufWriter again = GgufWriter::from(f);
  CHECK(same_bytes(again.to_bytes(), first));
  again.set<std::uint64_t>("b", 8);  // replaced in place
  again.set("c", "new");             // appended
  const GgufFile e(MappedFile::from_bytes(again.to_bytes()));
  REQUIRE(e.metadata().size() == 4);
  CHECK(e.metadata()[1].key == "b");
  CHECK(e.get<std::uint64_t>("b") == 8);
  CHECK(e.metadata()[3].key == "c");
  again.remove("a");
  CHECK(again.metadata().size() == 3);
  CHECK(again.metadata()[0].key == "b");
}

TEST_CASE("GgufWriter rejects what the reader would reject", "[io][gguf_writer]") {
  GgufWriter g;
  const std::vector<float> four(4);
  g.add_tensor<float>("t", {4}, four);
  CHECK_THROWS_WITH(g.add_tensor<float>("t", {4}, four), Contains("tensor name = t") && Contains("already"));
  CHECK_THROWS_WITH(g.add_tensor<float>("u", {5}, four), Contains("'u' data bytes") && Contains("16"));
  CHECK_THROWS_WITH(g.add_tensor<float>("v", {1, 1, 1, 1, 4}, four), Contains("'v' n_dims"));
  CHECK_THROWS_WITH(g.add_tensor("x", GgmlType::kQ8_0, {33}, std::as_bytes(std::span(four))), Contains("33"));
  CHECK_THROWS_WITH(g.add_tensor("iq", GgmlType::kIQ2_XXS, {256}, std::as_bytes(std::span(four))),
                    Contains("'iq'") && Contains("IQ2_XXS"));
  CHECK_THROWS_WITH(g.set<std::uint32_t>("general.alignment", 24), Contains("general.alignment") && Contains("24"));
  CHECK_THROWS_WITH(g.set<std::uint64_t>("general.alignment", 32), Contains("uint64"));
  CHECK_THROWS_WITH(g.set("", "x"), Contains("key length"));
  CHECK_THROWS_WITH(GgufWriter(1), Contains("version"));
}

TEST_CASE("GgufWriter round-trips files other programs wrote, bit for bit", "[io][gguf_writer][model]") {
  std::vector<std::string> paths;
  if (const auto p = gguf_test::env("INFERKIT_TEST_GGUF")) paths.push_back(*p);
  if (const auto d = gguf_test::env("INFERKIT_TEST_VOCAB_DIR"))
    for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf", "ggml-vocab-gpt-2.gguf",
                             "ggml-vocab-deepseek-llm.gguf"})
      paths.push_back(*d + "/" + name);
  if (paths.empty()) {
    WARN("INFERKIT_TEST_GGUF and INFERKIT_TEST_VOCAB_DIR are not set: skipped");
    return;
  }
  for (const auto& path : paths) {
    INFO(path);
    const GgufFile f = GgufFile::open(path);
    const auto out = GgufWriter::from(f).to_bytes();
    CHECK(same_bytes(out, f.file().bytes()));
  }
}
