// io/mapped_file.hpp: mapped and read files hold the bytes written to disk with std::ofstream (an
// independent writer), empty files, non-regular files (a FIFO goes through the read fallback),
// owned and lent memory, move semantics, and the error for a missing file.

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "inferkit/io/mapped_file.hpp"

using Catch::Matchers::Contains;
using inferkit::MappedFile;

namespace {

std::string write_temp(const std::string& name, const std::string& content) {
  std::ofstream o(name, std::ios::binary);
  o.write(content.data(), static_cast<std::streamsize>(content.size()));
  return name;
}

std::string as_string(const MappedFile& f) {
  return std::string(reinterpret_cast<const char*>(f.bytes().data()), f.size());
}

}  // namespace

TEST_CASE("MappedFile maps or reads the bytes of a file", "[io][mapped_file]") {
  std::string content(100000, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>((i * 131) % 251);
  const std::string path = write_temp("test_mapped_file.bin", content);
  const MappedFile m = MappedFile::open(path);
  CHECK(m.is_mapped());
  CHECK(as_string(m) == content);
  CHECK(m.name() == path);
  const MappedFile r = MappedFile::open(path, MappedFile::Mode::kRead);
  CHECK(!r.is_mapped());
  CHECK(as_string(r) == content);
  CHECK(reinterpret_cast<std::uintptr_t>(r.bytes().data()) % 64 == 0);
  MappedFile moved = MappedFile::open(path);
  MappedFile target = std::move(moved);
  CHECK(as_string(target) == content);
  CHECK(moved.size() == 0);
  std::remove(path.c_str());
}

TEST_CASE("MappedFile: empty files, FIFOs, memory", "[io][mapped_file]") {
  const std::string empty = write_temp("test_mapped_file_empty.bin", "");
  CHECK(MappedFile::open(empty).size() == 0);
  CHECK(MappedFile::open(empty, MappedFile::Mode::kRead).size() == 0);
  std::remove(empty.c_str());

  const std::string fifo = "test_mapped_file.fifo";
  std::remove(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string content(200000, 'x');  // more than one 64 KiB read
  std::thread writer([&] {
    std::ofstream o(fifo, std::ios::binary);
    o.write(content.data(), static_cast<std::streamsize>(content.size()));
  });
  const MappedFile p = MappedFile::open(fifo);
  writer.join();
  CHECK(!p.is_mapped());
  CHECK(as_string(p) == content);
  std::remove(fifo.c_str());

  const std::vector<std::byte> bytes = {std::byte{1}, std::byte{2}, std::byte{3}};
  const MappedFile owned = MappedFile::from_bytes(bytes, "mem");
  CHECK(owned.bytes().data() != bytes.data());
  CHECK(std::to_integer<int>(owned.bytes()[2]) == 3);
  const MappedFile lent = MappedFile::view(bytes);
  CHECK(lent.bytes().data() == bytes.data());
}

TEST_CASE("MappedFile names the path of a file it cannot open", "[io][mapped_file]") {
  CHECK_THROWS_WITH(MappedFile::open("/no/such/dir/model.gguf"), Contains("/no/such/dir/model.gguf"));
  CHECK_THROWS_AS(MappedFile::open("/no/such/dir/model.gguf"), std::invalid_argument);
}
