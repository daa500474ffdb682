// io/gguf.hpp: the reader against files assembled byte by byte from the format's published
// layout (tests/io/gguf_test_util.hpp), against stories260K.gguf (written by llama.cpp's converter)
// compared with the llama2.c checkpoint it came from (INFERKIT_TEST_GGUF, INFERKIT_TEST_MODEL),
// against the vocabulary files of ../shared/vocab (INFERKIT_TEST_VOCAB_DIR), and against hostile
// files: every failure the contract lists throws std::invalid_argument naming the key or tensor.

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf_test_util.hpp"
#include "inferkit/io/gguf.hpp"

using Catch::Matchers::Contains;
using gguf_test::Bytes;
using inferkit::GgmlType;
using inferkit::GgufArray;
using inferkit::GgufFile;
using inferkit::GgufValueType;
using inferkit::MappedFile;

namespace {

GgufFile parse(const Bytes& b) { return GgufFile(MappedFile::from_bytes(b.b, "test.gguf")); }

std::string parse_error(const Bytes& b) {
  try {
    (void)parse(b);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("the file was accepted");
  return "";
}

// A small valid file: one key of each type, two F32 tensors and a Q8_0 one.
Bytes sample_file(std::uint32_t version = 3) {
  Bytes b;
  b.header(version, 3, 16);
  b.key("k.u8", 0).u8(200);
  b.key("k.i8", 1).u8(static_cast<std::uint8_t>(-5));
  b.key("k.u16", 2).u16(60000);
  b.key("k.i16", 3).u16(static_cast<std::uint16_t>(-30000));
  b.key("k.u32", 4).u32(4000000000u);
  b.key("k.i32", 5).i32(-2000000000);
  b.key("k.f32", 6).f32(1.5f);
  b.key("k.bool", 7).u8(1);
  b.key("k.str", 8).str("h\xC3\xA9llo");
  b.key("k.u64", 10).u64(1ull << 60);
  b.key("k.i64", 11).u64(static_cast<std::uint64_t>(-(1ll << 61)));
  b.key("k.f64", 12).f64(-2.25);
  b.key("k.arr.f32", 9).u32(6).u64(3).f32(0.5f).f32(-1.0f).f32(3.0f);
  b.key("k.arr.str", 9).u32(8).u64(3).str("a").str("").str("\xE2\x96\x81x y");
  b.key("k.arr.bool", 9).u32(7).u64(2).u8(0).u8(1);
  b.key("k.arr.empty", 9).u32(5).u64(0);
  b.tensor("w", {3, 2}, 0, 0);  // 24 bytes
  b.tensor("q", {32}, 8, 32);   // Q8_0: one 34-byte block
  b.tensor("n", {4}, 0, 96);    // 16 bytes
  b.pad(32);
  for (int i = 0; i < 6; ++i) b.f32(static_cast<float>(i) + 0.25f);
  b.pad(32);
  for (int i = 0; i < 34; ++i) b.u8(static_cast<std::uint8_t>(i));
  b.pad(32);
  for (int i = 0; i < 4; ++i) b.f32(-static_cast<float>(i));
  b.pad(32);
  return b;
}

}  // namespace

TEST_CASE("GgufFile reads every value type of a hand-assembled file", "[io][gguf]") {
  for (std::uint32_t version : {2u, 3u}) {
    const GgufFile f = parse(sample_file(version));
    CHECK(f.version() == version);
    CHECK(f.alignment() == 32);
    REQUIRE(f.metadata().size() == 16);
    CHECK(f.metadata()[0].key == "k.u8");  // file order kept
    CHECK(f.get<std::uint8_t>("k.u8") == 200);
    CHECK(f.get<std::int8_t>("k.i8") == -5);
    CHECK(f.get<std::uint16_t>("k.u16") == 60000);
    CHECK(f.get<std::int16_t>("k.i16") == -30000);
    CHECK(f.get<std::uint32_t>("k.u32") == 4000000000u);
    CHECK(f.get<std::int32_t>("k.i32") == -2000000000);
    CHECK(f.get<float>("k.f32") == 1.5f);
    CHECK(f.get<bool>("k.bool"));
    CHECK(f.get<std::string>("k.str") == "h\xC3\xA9llo");
    CHECK(f.get<std::string_view>("k.str") == "h\xC3\xA9llo");
    CHECK(f.get<std::uint64_t>("k.u64") == (1ull << 60));
    CHECK(f.get<std::int64_t>("k.i64") == -(1ll << 61));
    CHECK(f.get<double>("k.f64") == -2.25);
    const auto fa = f.get_array<float>("k.arr.f32");
    REQUIRE(fa.size() == 3);
    CHECK(fa[0] == 0.5f);
    CHECK(fa[1] == -1.0f);
    CHECK(fa[2] == 3.0f);
    const GgufArray& sa = f.get<GgufArray>("k.arr.str");
    REQUIRE(sa.size() == 3);
    CHECK(sa.element_type() == GgufValueType::kString);
    CHECK(sa.string(0) == "a");
    CHECK(sa.string(1).empty());
    CHECK(sa.string(2) == "\xE2\x96\x81x y");
    const auto ba = f.get_array<bool>("k.arr.bool");
    REQUIRE(ba.size() == 2);
    CHECK(!ba[0]);
    CHECK(ba[1]);
    CHECK(f.get_array<std::int32_t>("k.arr.empty").empty());

    REQUIRE(f.tensors().size() == 3);
    CHECK(f.data_offset() % 32 == 0);
    const auto w = f.tensor("w");
    CHECK(w.info().n_dims == 2);
    CHECK(w.info().dims[0] == 3);
    CHECK(w.info().dims[1] == 2);
    CHECK(w.info().rows() == 2);
    const auto wv = w.values<float>();
    REQUIRE(wv.size() == 6);
    for (int i = 0; i < 6; ++i) CHECK(wv[i] == static_cast<float>(i) + 0.25f);
    CHECK(w.row(1).size() == 12);
    const auto q = f.tensor("q");
    CHECK(q.type() == GgmlType::kQ8_0);
    REQUIRE(q.bytes().size() == 34);
    for (int i = 0; i < 34; ++i) CHECK(std::to_integer<int>(q.bytes()[i]) == i);
    const auto n = f.tensor("n").values<float>();
    REQUIRE(n.size() == 4);
    CHECK(n[3] == -3.0f);
    // The views point into the file's bytes: nothing was copied.
    CHECK(reinterpret_cast<const std::byte*>(wv.data()) == f.file().bytes().data() + f.data_offset());
  }
}

TEST_CASE("GgufFile typed access: exact types, optional and required forms, clear errors", "[io][gguf]") {
  const GgufFile f = parse(sample_file());
  CHECK(!f.find<std::uint32_t>("absent").has_value());
  CHECK(f.find<std::uint32_t>("k.u32") == 4000000000u);
  CHECK_THROWS_WITH(f.get<std::uint32_t>("absent"), Contains("absent") && Contains("missing"));
  // A present key of another type is an error in both forms, naming key, stored and asked types.
  CHECK_THROWS_WITH(f.get<std::uint32_t>("k.i32"), Contains("k.i32") && Contains("int32") && Contains("uint32"));
  CHECK_THROWS_WITH(f.find<float>("k.f64"), Contains("k.f64") && Contains("float64") && Contains("float32"));
  CHECK_THROWS_WITH(f.get_array<std::int32_t>("k.arr.f32"), Contains("k.arr.f32") && Contains("float32"));
  CHECK_THROWS_WITH(f.get<GgufArray>("k.str"), Contains("k.str") && Contains("string") && Contains("array"));
  // Integers of any stored integer type convert when the value fits.
  CHECK(f.get_integer<std::int64_t>("k.u32") == 4000000000ll);
  CHECK(f.get_integer<std::uint8_t>("k.u8") == 200);
  CHECK_THROWS_WITH(f.get_integer<std::int32_t>("k.u32"), Contains("k.u32") && Contains("4000000000"));
  CHECK_THROWS_WITH(f.get_integer<std::uint32_t>("k.i8"), Contains("k.i8") && Contains("-5"));
  CHECK_THROWS_WITH(f.get_integer<int>("k.f32"), Contains("k.f32") && Contains("float32"));
  CHECK(!f.find_integer<int>("absent").has_value());
  // Tensors.
  CHECK(!f.find_tensor("absent").has_value());
  CHECK_THROWS_WITH(f.tensor("absent"), Contains("absent"));
  CHECK_THROWS_WITH(f.tensor("w").values<inferkit::Float16>(), Contains("'w'") && Contains("F32") && Contains("F16"));
  CHECK_THROWS_WITH(f.tensor("q").values<float>(), Contains("'q'") && Contains("Q8_0"));
  CHECK_THROWS_AS(f.tensor("w").row(2), std::out_of_range);
}

TEST_CASE("GgufFile: general.alignment sets the data alignment", "[io][gguf]") {
  Bytes b;
  b.header(3, 2, 1);
  b.key("general.alignment", 4).u32(8);
  b.tensor("a", {3}, 0, 0);  // 12 bytes, next at 16
  b.tensor("b", {1}, 0, 16);
  b.pad(8);
  const std::size_t data = b.size();
  b.f32(1).f32(2).f32(3).u32(0).f32(4).u32(0);
  const GgufFile f = parse(b);
  CHECK(f.alignment() == 8);
  CHECK(f.data_offset() == data);
  CHECK(f.tensor("b").values<float>()[0] == 4.0f);
}

TEST_CASE("GgufFile: tensor types without a known layout load as metadata only", "[io][gguf]") {
  Bytes b;
  b.header(3, 2, 0);
  b.tensor("iq", {256, 2}, 16, 0);  // IQ2_XXS
  b.tensor("f", {2}, 0, 160);
  b.pad(32);
  for (int i = 0; i < 160; ++i) b.u8(7);
  b.f32(1).f32(2);
  const GgufFile f = parse(b);
  const auto iq = f.tensor("iq");
  CHECK(iq.type() == GgmlType::kIQ2_XXS);
  CHECK(!iq.info().layout_known);
  CHECK_THROWS_WITH(iq.bytes(), Contains("'iq'") && Contains("IQ2_XXS"));
  CHECK_THROWS_WITH(iq.row(0), Contains("'iq'") && Contains("IQ2_XXS"));
  CHECK(f.tensor("f").values<float>()[1] == 2.0f);
}

TEST_CASE("GgufFile: mapped and read files give the same result", "[io][gguf]") {
  const Bytes b = sample_file();
  const std::string path = "test_gguf_mapped.gguf";
  {
    std::ofstream o(path, std::ios::binary);
    o.write(reinterpret_cast<const char*>(b.b.data()), static_cast<std::streamsize>(b.size()));
  }
  const GgufFile m = GgufFile::open(path);
  const GgufFile r = GgufFile::open(path, MappedFile::Mode::kRead);
  CHECK(m.file().is_mapped());
  CHECK(!r.file().is_mapped());
  CHECK(m.metadata() == r.metadata());
  const auto a = m.tensor("w").values<float>(), c = r.tensor("w").values<float>();
  CHECK(std::vector<float>(a.begin(), a.end()) == std::vector<float>(c.begin(), c.end()));
  CHECK_THROWS_WITH(GgufFile::open("no/such/file.gguf"), Contains("no/such/file.gguf"));
  std::remove(path.c_str());
}

// ---- hostile files ------------------------------------------------------------------------------

TEST_CASE("GgufFile rejects every truncation of a valid file", "[io][gguf][hostile]") {
  const Bytes full = sample_file();
  // Every prefix that cuts the header, the metadata, the tensor infos or a tensor's data.
  const std::size_t last_tensor_end = full.size() - 16;  // "n" ends 16 bytes before the final pad
  for (std::size_t n = 0; n < last_tensor_end; ++n) {
    Bytes cut;
    cut.b.assign(full.b.begin(), full.b.begin() + static_cast<std::ptrdiff_t>(n));
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(parse(cut), std::invalid_argument);
  }
  CHECK_THROWS_WITH(parse(Bytes{}), Contains("magic") && Contains("truncated"));
}

TEST_CASE("GgufFile rejects bad magic and versions", "[io][gguf][hostile]") {
  Bytes b;
  b.raw("GGUE", 4).u32(3).u64(0).u64(0);
  CHECK_THAT(parse_error(b), Contains("magic") && Contains("0x45554747"));
  for (std::uint32_t v : {0u, 1u, 4u, 1000u}) {
    Bytes w;
    w.header(v, 0, 0);
    CHECK_THAT(parse_error(w), Contains("version") && Contains(std::to_string(v)));
  }
  Bytes be;
  be.header(0x03000000u, 0, 0);
  CHECK_THAT(parse_error(be), Contains("big-endian"));
}

TEST_CASE("GgufFile rejects counts and lengths the file cannot hold, before allocating", "[io][gguf][hostile]") {
  {
    Bytes b;
    b.header(3, 0, 1ull << 62);
    CHECK_THAT(parse_error(b), Contains("metadata count") && Contains(std::to_string(1ull << 62)));
  }
  {
    Bytes b;
    b.header(3, std::numeric_limits<std::uint64_t>::max(), 0);
    CHECK_THAT(parse_error(b), Contains("tensor count"));
  }
  {
    Bytes b;
    b.header(3, 0, 1).u64(1ull << 40).raw("abcdefghijklmnop", 16);
    CHECK_THAT(parse_error(b), Contains("metadata key length") && Contains(std::to_string(1ull << 40)));
  }
  {
    Bytes b;
    b.header(3, 0, 1).key("s", 8).u64(1000).raw("short", 5);
    CHECK_THAT(parse_error(b), Contains("key 's'") && Contains("1000") && Contains("bytes left"));
  }
  {
    Bytes b;  // 2^60 uint32 elements claimed by a 40-byte file
    b.header(3, 0, 1).key("a", 9).u32(4).u64(1ull << 60).u32(1);
    CHECK_THAT(parse_error(b), Contains("array count of key 'a'") && Contains(std::to_string(1ull << 60)));
  }
  {
    Bytes b;  // string array: each element needs at least its 8-byte length
    b.header(3, 0, 1).key("t", 9).u32(8).u64(5).str("x");
    CHECK_THAT(parse_error(b), Contains("array count of key 't'") && Contains("5"));
  }
  {
    Bytes b;  // string array whose element length runs past the end
    b.header(3, 0, 1).key("t", 9).u32(8).u64(2).str("x").u64(1ull << 50).raw("abcdefgh", 8);
    CHECK_THAT(parse_error(b), Contains("key 't'") && Contains(std::to_string(1ull << 50)));
  }
}

TEST_CASE("GgufFile rejects unknown and malformed values", "[io][gguf][hostile]") {
  {
    Bytes b;
    b.header(3, 0, 1).key("x", 13).u32(0);
    CHECK_THAT(parse_error(b), Contains("value type of key 'x'") && Contains("13"));
  }
  {
    Bytes b;
    b.header(3, 0, 1).key("x", 9).u32(99).u64(0);
    CHECK_THAT(parse_error(b), Contains("array element type of key 'x'") && Contains("99"));
  }
  {
    Bytes b;
    b.header(3, 0, 1).key("x", 9).u32(9).u64(1).u32(4).u64(0);
    CHECK_THAT(parse_error(b), Contains("key 'x'") && Contains("arrays of arrays"));
  }
  {
    Bytes b;
    b.header(3, 0, 1).key("flag", 7).u8(2);
    CHECK_THAT(parse_error(b), Contains("key 'flag'") && Contains("2") && Contains("0 or 1"));
  }
  {
    Bytes b;
    b.header(3, 0, 1).key("flags", 9).u32(7).u64(3).u8(0).u8(1).u8(9);
    CHECK_THAT(parse_error(b), Contains("key 'flags'") && Contains("9"));
  }
  {
    Bytes b;
    b.header(3, 0, 2).key("dup", 4).u32(1).key("dup", 4).u32(2);
    CHECK_THAT(parse_error(b), Contains("dup") && Contains("duplicated"));
  }
  {
    Bytes b;
    b.header(3, 0, 1).key("", 4).u32(1);
    CHECK_THAT(parse_error(b), Contains("metadata key") && Contains("empty"));
  }
  {
    Bytes b;
    b.header(3, 0, 1).key("general.alignment", 10).u64(32);
    CHECK_THAT(parse_error(b), Contains("general.alignment") && Contains("uint64") && Contains("uint32"));
  }
  for (std::uint32_t a : {0u, 3u, 48u}) {
    Bytes b;
    b.header(3, 0, 1).key("general.alignment", 4).u32(a);
    CHECK_THAT(parse_error(b),
               Contains("general.alignment") && Contains(std::to_string(a)) && Contains("power of two"));
  }
}

TEST_CASE("GgufFile rejects malformed tensor infos", "[io][gguf][hostile]") {
  auto one_tensor = [](std::vector<std::uint64_t> dims, std::uint32_t type, std::uint64_t offset,
                       std::size_t data_bytes = 64) {
    Bytes b;
    b.header(3, 1, 0).tensor("blk.0.w", std::move(dims), type, offset);
    b.pad(32);
    for (std::size_t i = 0; i < data_bytes; ++i) b.u8(0);
    return b;
  };
  CHECK_NOTHROW(parse(one_tensor({16}, 0, 0)));
  CHECK_THAT(parse_error(one_tensor({}, 0, 0)), Contains("'blk.0.w' n_dims") && Contains("0"));
  CHECK_THAT(parse_error(one_tensor({1, 1, 1, 1, 1}, 0, 0)), Contains("'blk.0.w' n_dims") && Contains("5"));
  CHECK_THAT(parse_error(one_tensor({1ull << 32, 1ull << 32}, 0, 0)),
             Contains("'blk.0.w' element count") && Contains("overflow"));
  CHECK_THAT(parse_error(one_tensor({1ull << 63}, 0, 0)), Contains("'blk.0.w' dim 0"));
  CHECK_THAT(parse_error(one_tensor({1ull << 62}, 0, 0)), Contains("'blk.0.w' byte count") && Contains("overflow"));
  CHECK_THAT(parse_error(one_tensor({33}, 8, 0)), Contains("'blk.0.w' dim 0") && Contains("33") && Contains("Q8_0"));
  CHECK_THAT(parse_error(one_tensor({16}, 4, 0)), Contains("'blk.0.w' type") && Contains("4"));
  CHECK_THAT(parse_error(one_tensor({16}, 1000, 0)), Contains("'blk.0.w' type") && Contains("1000"));
  CHECK_THAT(parse_error(one_tensor({4}, 0, 8)),
             Contains("'blk.0.w' offset") && Contains("8") && Contains("alignment"));
  CHECK_THAT(parse_error(one_tensor({4}, 0, 64)), Contains("'blk.0.w' extent") && Contains("data section"));
  CHECK_THAT(parse_error(one_tensor({17}, 0, 0)), Contains("'blk.0.w' extent"));
  CHECK_THAT(parse_error(one_tensor({4}, 0, 1ull << 63)), Contains("'blk.0.w' extent"));
  {
    Bytes b;
    b.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("a", {16}, 0, 64);
    CHECK_THAT(parse_error(b), Contains("tensor name") && Contains("a") && Contains("duplicated"));
  }
  {
    Bytes b;  // a: [0, 64), b: [32, 96)
    b.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32);
    b.pad(32);
    for (int i = 0; i < 128; ++i) b.u8(0);
    CHECK_THAT(parse_error(b), Contains("tensor 'b' offset") && Contains("overlaps tensor 'a'"));
  }
  {
    Bytes b;  // the order in the file does not matter
    b.header(3, 2, 0).tensor("b", {16}, 0, 32).tensor("a", {16}, 0, 0);
    b.pad(32);
    for (int i = 0; i < 128; ++i) b.u8(0);
    CHECK_THAT(parse_error(b), Contains("tensor 'b'") && Contains("overlaps tensor 'a'"));
  }
  {
    Bytes b;  // tensors in the file's metadata but the data section missing
    b.header(3, 1, 0).tensor("a", {16}, 0, 0);
    CHECK_THAT(parse_error(b), Contains("data section") && Contains("truncated"));
  }
  {
    Bytes b;  // the tensor name itself runs past the end
    b.header(3, 1, 0).u64(100).raw("abcdefghijklmnopqrstuvwxyz0123456789", 36);
    CHECK_THAT(parse_error(b), Contains("name of tensor 0") && Contains("100"));
  }
}

// ---- real files ---------------------------------------------------------------------------------

namespace {

// The llama2.c checkpoint, read from its documented layout (7 int32 header, then float32 tensors).
struct Llama2cCheckpoint {
  int dim, hidden, layers, heads, kv_heads, vocab, seq_len;
  std::vector<float> w;
  std::size_t token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final;
};

Llama2cCheckpoint read_llama2c(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f);
  std::int32_t h[7];
  f.read(reinterpret_cast<char*>(h), sizeof(h));
  Llama2cCheckpoint c{h[0], h[1], h[2], h[3], h[4], h[5] < 0 ? -h[5] : h[5], h[6], {}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  REQUIRE(h[5] > 0);  // shared classifier
  std::vector<char> rest((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  c.w.resize(rest.size() / 4);
  std::memcpy(c.w.data(), rest.data(), c.w.size() * 4);
  const std::size_t d = c.dim, kv = static_cast<std::size_t>(c.dim / c.heads * c.kv_heads), L = c.layers, hd = c.hidden,
                    V = c.vocab;
  std::size_t o = 0;
  auto take = [&](std::size_t n) {
    const std::size_t at = o;
    o += n;
    return at;
  };
  c.token_embedding = take(V * d);
  c.rms_att = take(L * d);
  c.wq = take(L * d * d);
  c.wk = take(L * kv * d);
  c.wv = take(L * kv * d);
  c.wo = take(L * d * d);
  c.rms_ffn = take(L * d);
  c.w1 = take(L * hd * d);
  c.w2 = take(L * d * hd);
  c.w3 = take(L * hd * d);
  c.rms_final = take(d);
  REQUIRE(o <= c.w.size());
  return c;
}

}  // namespace

TEST_CASE("GgufFile reads stories260K.gguf (llama.cpp's converter) consistently with the llama2.c file",
          "[io][gguf][model]") {
  const auto gguf_path = gguf_test::env("INFERKIT_TEST_GGUF");
  const auto bin_path = gguf_test::env("INFERKIT_TEST_MODEL");
  if (!gguf_path || !bin_path) {
    WARN("INFERKIT_TEST_GGUF or INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const GgufFile f = GgufFile::open(*gguf_path);
  const Llama2cCheckpoint c = read_llama2c(*bin_path);
  CHECK(f.version() == 3);
  CHECK(f.get<std::string>("general.architecture") == "llama");
  CHECK(f.get<std::uint32_t>("llama.embedding_length") == static_cast<std::uint32_t>(c.dim));
  CHECK(f.get<std::uint32_t>("llama.feed_forward_length") == static_cast<std::uint32_t>(c.hidden));
  CHECK(f.get<std::uint32_t>("llama.block_count") == static_cast<std::uint32_t>(c.layers));
  CHECK(f.get<std::uint32_t>("llama.attention.head_count") == static_cast<std::uint32_t>(c.heads));
  CHECK(f.get<std::uint32_t>("llama.attention.head_count_kv") == static_cast<std::uint32_t>(c.kv_heads));
  CHECK(f.get<std::uint32_t>("llama.context_length") == static_cast<std::uint32_t>(c.seq_len));
  CHECK(f.get<std::uint32_t>("llama.rope.dimension_count") == static_cast<std::uint32_t>(c.dim / c.heads));
  CHECK(f.get<float>("llama.attention.layer_norm_rms_epsilon") == 1e-5f);
  CHECK(!f.find<float>("llama.rope.freq_base").has_value());
  CHECK(f.get<GgufArray>("tokenizer.ggml.tokens").size() == static_cast<std::size_t>(c.vocab));
  CHECK(f.get_array<float>("tokenizer.ggml.scores").size() == static_cast<std::size_t>(c.vocab));
  CHECK(f.get<std::uint32_t>("tokenizer.ggml.bos_token_id") == 1);
  REQUIRE(f.tensors().size() == 3 + 9 * static_cast<std::size_t>(c.layers));

  // Every tensor: shape (ggml order, fastest first: a llama2.c out x in matrix is {in, out}) and
  // the floats themselves, bit for bit, against the checkpoint. The converter writes Q and K rows
  // in llama2.c's order (no permutation: both use adjacent RoPE pairs) and the shared classifier
  // as its own `output` tensor equal to the embedding.
  const std::size_t d = c.dim, kv = static_cast<std::size_t>(c.dim / c.heads * c.kv_heads), hd = c.hidden;
  auto same = [&](const std::string& name, std::vector<std::uint64_t> dims, std::size_t at) {
    INFO(name);
    const auto t = f.tensor(name);
    REQUIRE(t.info().n_dims == dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) CHECK(t.info().dims[i] == dims[i]);
    const auto v = t.values<float>();
    REQUIRE(at + v.size() <= c.w.size());
    CHECK(std::memcmp(v.data(), c.w.data() + at, v.size_bytes()) == 0);
  };
  same("token_embd.weight", {d, static_cast<std::uint64_t>(c.vocab)}, c.token_embedding);
  same("output.weight", {d, static_cast<std::uint64_t>(c.vocab)}, c.token_embedding);
  same("output_norm.weight", {d}, c.rms_final);
  for (std::size_t l = 0; l < static_cast<std::size_t>(c.layers); ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    same(p + "attn_norm.weight", {d}, c.rms_att + l * d);
    same(p + "attn_q.weight", {d, d}, c.wq + l * d * d);
    same(p + "attn_k.weight", {d, kv}, c.wk + l * kv * d);
    same(p + "attn_v.weight", {d, kv}, c.wv + l * kv * d);
    same(p + "attn_output.weight", {d, d}, c.wo + l * d * d);
    same(p + "ffn_norm.weight", {d}, c.rms_ffn + l * d);
    same(p + "ffn_gate.weight", {d, hd}, c.w1 + l * hd * d);
    same(p + "ffn_down.weight", {hd, d}, c.w2 + l * d * hd);
    same(p + "ffn_up.weight", {d, hd}, c.w3 + l * hd * d);
  }
}

TEST_CASE("GgufFile reads the vocabulary files of ../shared/vocab", "[io][gguf][vocab]") {
  const auto dir = gguf_test::env("INFERKIT_TEST_VOCAB_DIR");
  if (!dir) {
    WARN("INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  struct Expect {
    const char* file;
    const char* model;
    std::size_t n_tokens;
    std::uint32_t bos;
  };
  // Sizes and BOS ids from ../shared/vocab/README.md.
  for (const Expect& e :
       {Expect{"ggml-vocab-llama-spm.gguf", "llama", 32000, 1}, Expect{"ggml-vocab-phi-3.gguf", "llama", 32064, 1},
        Expect{"ggml-vocab-gpt-2.gguf", "gpt2", 50257, 50256},
        Expect{"ggml-vocab-deepseek-llm.gguf", "gpt2", 102400, 100000}}) {
    INFO(e.file);
    const GgufFile f = GgufFile::open(*dir + "/" + e.file);
    CHECK(f.tensors().empty());
    CHECK(f.get<std::string>("tokenizer.ggml.model") == e.model);
    const GgufArray& tokens = f.get<GgufArray>("tokenizer.ggml.tokens");
    CHECK(tokens.size() == e.n_tokens);
    CHECK(f.get_array<std::int32_t>("tokenizer.ggml.token_type").size() == e.n_tokens);
    CHECK(f.get<std::uint32_t>("tokenizer.ggml.bos_token_id") == e.bos);
    if (std::string(e.model) == "llama") {
      CHECK(tokens.string(1) == "<s>");
      CHECK(tokens.string(3) == "<0x00>");
      CHECK(f.get_array<float>("tokenizer.ggml.scores").size() == e.n_tokens);
    } else {
      CHECK(f.get<GgufArray>("tokenizer.ggml.merges").size() > 0);
    }
  }
}
