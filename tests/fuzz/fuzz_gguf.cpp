// Fuzzes the GGUF reader (io/gguf.hpp) with arbitrary bytes, and on what loads the writer
// (io/gguf_writer.hpp), the typed accessors and the vocabulary builder (tokenizer/gguf_vocabulary.hpp).
// Invariants: a file either loads or throws std::invalid_argument / std::out_of_range; a loaded file
// written back loads again with equal metadata, tensor infos and tensor bytes, and writing that
// one gives the same bytes again; typed views never read outside the input; a vocabulary that
// builds gives a tokenizer (when its pre-tokenizer is known) whose ids are in range.
// Seeds: tests/fuzz/corpus/fuzz_gguf/, small files written by GgufWriter (make_gguf_seeds.cpp) and
// truncations of them.

#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/io/gguf.hpp"
#include "inferkit/io/gguf_writer.hpp"
#include "inferkit/tokenizer/gguf_vocabulary.hpp"
#include "inferkit/tokenizer/tokenizer.hpp"

namespace {

void touch_tensors(const inferkit::GgufFile& f) {
  for (std::size_t i = 0; i < f.tensors().size(); ++i) {
    const auto t = f.tensor_at(i);
    fuzz::ok([&] {
      const auto b = t.bytes();
      volatile unsigned sum = 0;
      for (const auto x : b) sum = sum + std::to_integer<unsigned>(x);
      if (t.info().rows() > 0) (void)t.row(t.info().rows() - 1);
    });
    fuzz::ok([&] { (void)t.values<float>(); });
    fuzz::ok([&] { (void)t.values<inferkit::Float16>(); });
  }
}

// Equal values, floats compared by their bits (NaN payloads included).
bool same_value(const inferkit::GgufValue& a, const inferkit::GgufValue& b) {
  if (a.type() != b.type()) return false;
  return std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        const X& y = std::get<X>(b.storage());
        if constexpr (std::is_floating_point_v<X>) {
          return std::memcmp(&x, &y, sizeof(X)) == 0;
        } else if constexpr (std::is_same_v<X, inferkit::GgufArray>) {
          if (x.element_type() != y.element_type() || x.size() != y.size()) return false;
          if (x.element_type() != inferkit::GgufValueType::kString) {
            const auto p = x.raw_bytes(), q = y.raw_bytes();
            return p.size() == q.size() && (p.empty() || std::memcmp(p.data(), q.data(), p.size()) == 0);
          }
          for (std::size_t i = 0; i < x.size(); ++i)
            if (x.string(i) != y.string(i)) return false;
          return true;
        } else {
          return x == y;
        }
      },
      a.storage());
}

void check_round_trip(const inferkit::GgufFile& f) {
  // A file that loaded must write back (no documented error may escape here).
  const std::vector<std::byte> once = inferkit::GgufWriter::from(f).to_bytes();
  const inferkit::GgufFile g(inferkit::MappedFile::view(once, "rewritten"));
  FUZZ_CHECK(g.metadata().size() == f.metadata().size());
  for (std::size_t i = 0; i < f.metadata().size(); ++i)
    FUZZ_CHECK(g.metadata()[i].key == f.metadata()[i].key && same_value(g.metadata()[i].value, f.metadata()[i].value));
  FUZZ_CHECK(g.tensors().size() == f.tensors().size());
  for (std::size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& a = f.tensors()[i];
    const auto& b = g.tensors()[i];
    FUZZ_CHECK(a.name == b.name && a.type == b.type && a.n_dims == b.n_dims && a.dims == b.dims);
    if (a.layout_known) {
      const auto x = f.tensor_at(i).bytes(), y = g.tensor_at(i).bytes();
      FUZZ_CHECK(x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0));
    }
  }
  const auto twice = inferkit::GgufWriter::from(g).to_bytes();
  FUZZ_CHECK(twice == once);
}

void try_vocabulary(const inferkit::GgufFile& f) {
  if (!f.contains("tokenizer.ggml.model")) return;
  std::optional<inferkit::Tokenizer> tok;
  if (!fuzz::ok([&] { tok.emplace(inferkit::vocabulary_from_gguf(f)); })) return;
  for (const char* text : {"Hello world", " a  b\n\n<s>", "\xC3\xA9\xFF"}) {
    std::vector<inferkit::TokenId> ids;
    if (!fuzz::ok([&] { ids = tok->encode(text, inferkit::EncodeOptions{.parse_special = true}); })) continue;
    for (const auto id : ids) FUZZ_CHECK(id >= 0 && static_cast<std::size_t>(id) < tok->vocabulary().size());
    (void)tok->decode(ids);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  std::optional<inferkit::GgufFile> f;
  if (!fuzz::ok([&] { f.emplace(inferkit::MappedFile::view(bytes, "fuzz")); })) return 0;
  for (const auto& kv : f->metadata()) {
    fuzz::ok([&] { (void)f->get<std::uint32_t>(kv.key); });
    fuzz::ok([&] { (void)f->get_integer<std::int64_t>(kv.key); });
    fuzz::ok([&] { (void)f->get<std::string_view>(kv.key); });
    fuzz::ok([&] {
      const auto& a = f->get<inferkit::GgufArray>(kv.key);
      if (!a.empty()) (void)a.string(a.size() - 1);
    });
  }
  touch_tensors(*f);
  check_round_trip(*f);
  try_vocabulary(*f);
  return 0;
}
