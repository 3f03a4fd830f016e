// The chunk store, part 1: keys (determinism across processes, position-free, framing), the blob
// format, the disk tier's round trip and reopening, fingerprint checks, and `orbit store` end to end.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <sys/wait.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "inspect_verify.h"  // store/src: verify_rows
#include "orbit/common/error.h"
#include "orbit/common/sha256.h"
#include "orbit/store.h"
#include "orbit/store/blob_format.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/sqlite_index.h"
#include "test_helpers.h"
#include "test_store_checks.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using orbit::Error;
using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i), disk_options(dir) (test_store_values.h)

namespace {

using Run = orbit::test::CliRun;
const auto run = orbit::test::run_command;

}  // namespace

TEST_CASE("content keys are SHA-256 over framed content and the fingerprint", "[store][cpu]") {
  const std::string fp = test::kStoreTestFingerprint;
  // Golden value (computed independently with Python's hashlib over the documented framing): a change of
  // the framing would silently orphan every existing store, so it must be deliberate.
  CHECK(chunk_key_tokens(fp, {1, 2, 3}) == "2be2588fe26b29bb0fa75300d92c36ab5280cfe47430cd7b7628885821803269");
  CHECK(is_store_key(chunk_key_tokens(fp, {})));
  CHECK(chunk_key_tokens(fp, {1, 2, 3}) != chunk_key_tokens(fp, {1, 2, 4}));
  CHECK(chunk_key_tokens(fp, {1, 2, 3}) != chunk_key_tokens(fp, {3, 2, 1}));
  CHECK(chunk_key_tokens(fp, {1, 2, 3}) != chunk_key_tokens("other-model", {1, 2, 3}));
  CHECK(chunk_key_tokens(fp, {12}) != chunk_key_tokens(fp, {1, 2}));  // framed: no concatenation ambiguity
  CHECK_THROWS_WITH(chunk_key_tokens("", {1}), Contains("fingerprint is empty"));
}

TEST_CASE("content keys are identical in another process", "[store][cpu]") {
  for (const std::string tokens : {"1,2,3", "5", "100,200,300,400"}) {
    const Run r = run(std::string(ORBIT_STORE_CHILD_PATH) + " key " + test::kStoreTestFingerprint + " " + tokens);
    REQUIRE(r.status == 0);
    std::vector<int64_t> ids;
    for (std::size_t p = 0; p < tokens.size();) {
      const std::size_t q = tokens.find(',', p);
      ids.push_back(std::stoll(tokens.substr(p, q - p)));
      p = q == std::string::npos ? tokens.size() : q + 1;
    }
    CHECK(r.out == chunk_key_tokens(test::kStoreTestFingerprint, ids) + "\n");
  }
}

TEST_CASE("media and embedding keys are position-free", "[store][cpu]") {
  const std::string fp = test::kStoreTestFingerprint;
  // The same 2x2 image grid (t, h, w per token) placed at two offsets: same key.
  const std::vector<int64_t> at_origin{0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1};
  const std::vector<int64_t> shifted{7, 30, 30, 7, 30, 31, 7, 31, 30, 7, 31, 31};
  CHECK(chunk_key_media(fp, "img-digest", at_origin, 3) == chunk_key_media(fp, "img-digest", shifted, 3));
  const std::vector<int64_t> other_shape{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3};  // 1x4, not 2x2
  CHECK(chunk_key_media(fp, "img-digest", at_origin, 3) != chunk_key_media(fp, "img-digest", other_shape, 3));
  CHECK(chunk_key_media(fp, "img-digest", at_origin, 3) != chunk_key_media(fp, "img-digest2", at_origin, 3));
  CHECK_THROWS_WITH(chunk_key_media(fp, "d", {1, 2}, 3), Contains("not a multiple of grid_dims"));

  const at::Tensor e = at::arange(12, at::kFloat).reshape({3, 4});
  EmbeddingBytes bytes{e.data_ptr(), static_cast<std::size_t>(e.nbytes()), "float32", 3, 4};
  const at::Tensor e2 = e.clone();
  EmbeddingBytes same{e2.data_ptr(), static_cast<std::size_t>(e2.nbytes()), "float32", 3, 4};
  CHECK(chunk_key_embeddings(fp, bytes) == chunk_key_embeddings(fp, same));
  EmbeddingBytes reshaped{e.data_ptr(), static_cast<std::size_t>(e.nbytes()), "float32", 4, 3};
  CHECK(chunk_key_embeddings(fp, bytes) != chunk_key_embeddings(fp, reshaped));
  CHECK(chunk_key_embeddings(fp, bytes) != chunk_key_tokens(fp, {}));
}

namespace {

// The signature definitions written out independently of store/src/keys.cpp: SHA-256 over length-framed
// fields, a hash chain for the exact signature, and a byte-wise 256-bit sum for the orbit multiset.
std::string framed_hash(const std::vector<std::string>& fields) {
  Sha256 h;
  for (const std::string& f : fields) h.update_u64(f.size()).update(f);
  return h.hex_digest();
}

std::array<uint8_t, 32> digest_bytes(const std::string& hex) {
  std::array<uint8_t, 32> out{};
  for (std::size_t i = 0; i < 32; ++i) out[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

std::string reference_orbit(const std::string& prefix_chain, const std::vector<std::string>& members) {
  std::array<uint8_t, 32> sum{};  // big-endian, mod 2^256
  for (const std::string& m : members) {
    const std::array<uint8_t, 32> d = digest_bytes(framed_hash({"orbit.context.member.v2", m}));
    unsigned carry = 0;
    for (int i = 31; i >= 0; --i) {
      const unsigned t = sum[static_cast<std::size_t>(i)] + d[static_cast<std::size_t>(i)] + carry;
      sum[static_cast<std::size_t>(i)] = static_cast<uint8_t>(t & 0xff);
      carry = t >> 8;
    }
  }
  Sha256 h;
  const std::string tag = "orbit.context.orbit.v2";
  h.update_u64(tag.size()).update(tag).update_u64(prefix_chain.size()).update(prefix_chain);
  h.update_u64(members.size());
  for (int limb = 0; limb < 4; ++limb) {  // least significant 64 bits first
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v = (v << 8) | sum[static_cast<std::size_t>(24 - 8 * limb + b)];
    h.update_u64(v);
  }
  return h.hex_digest();
}

}  // namespace

TEST_CASE("context signatures: a hash chain and a multiset sum, every prefix signed incrementally", "[store][cpu]") {
  const std::string fp = test::kStoreTestFingerprint;
  std::vector<std::string> keys;
  for (int64_t i = 0; i < 40; ++i) keys.push_back(chunk_key_tokens(fp, {i, 7}));
  keys.push_back(keys[5]);  // a repeat: the antecedents are a multiset
  for (std::size_t prefix : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
    ContextSigner signer(prefix);
    std::vector<std::string> chains = {framed_hash({"orbit.context.exact.v2"})};
    CHECK(signer.exact() == chains[0]);
    CHECK(signer.orbit() == reference_orbit(chains[0], {}));
    for (std::size_t n = 1; n <= keys.size(); ++n) {
      signer.push(keys[n - 1]);
      chains.push_back(framed_hash({chains.back(), keys[n - 1]}));
      const std::size_t p = std::min(prefix, n);
      const std::vector<std::string> ctx(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n));
      const std::vector<std::string> pre(ctx.begin(), ctx.begin() + static_cast<std::ptrdiff_t>(p));
      const std::vector<std::string> ante(ctx.begin() + static_cast<std::ptrdiff_t>(p), ctx.end());
      REQUIRE(signer.size() == n);
      CHECK(signer.exact() == chains[n]);
      CHECK(signer.exact() == exact_signature(ctx));
      CHECK(signer.orbit() == reference_orbit(chains[p], ante));
      CHECK(signer.orbit() == orbit_signature(pre, ante));
    }
  }
  // Any order of the antecedents signs the same (the sum carries across limbs for 41 random digests).
  std::vector<std::string> shuffled(keys.rbegin(), keys.rend());
  std::swap(shuffled[3], shuffled[17]);
  CHECK(orbit_signature({}, keys) == orbit_signature({}, shuffled));
  CHECK(exact_signature(keys) != exact_signature(shuffled));
  ContextSigner bad;
  CHECK_THROWS_WITH(bad.push("not-a-key"), Contains("not a store key"));
  // Stores on disk are keyed by these: the values are pinned (a change of the hashing is a format change).
  std::vector<std::string> k;
  for (int i = 0; i < 5; ++i) k.push_back(sha256_hex(std::to_string(i)));
  CHECK(exact_signature(k) == "feef72f6ccc4ffb08204677acfcc38bbeb18680aef9fff053198638bef2627ec");
  CHECK(orbit_signature({k[0], k[1]}, {k[2], k[3], k[4]}) ==
        "4027f19f492f81ba44c0b718228c78a3f7228289a9cc76422ec68f8379890e5b");
  CHECK(patch_key({k[0], k[1], "full", 3, 4}) == "f05ccbc01e457243823ce6cc86df5d32e6699f6eb5ec11ff05ec35987240f4b1");
}

TEST_CASE("patch keys: exact signatures are ordered, orbit signatures sort the antecedents", "[store][cpu]") {
  const std::string fp = test::kStoreTestFingerprint;
  const std::string a = chunk_key_tokens(fp, {1}), b = chunk_key_tokens(fp, {2}), c = chunk_key_tokens(fp, {3});
  const std::string p = chunk_key_tokens(fp, {0});
  CHECK(exact_signature({a, b}) != exact_signature({b, a}));
  CHECK(exact_signature({a, b}) == exact_signature({a, b}));
  CHECK(orbit_signature({p}, {a, b, c}) == orbit_signature({p}, {c, a, b}));
  CHECK(orbit_signature({p}, {a, b}) != orbit_signature({}, {p, a, b}));  // the prefix is not part of the set
  CHECK(orbit_signature({}, {a, a}) != orbit_signature({}, {a}));         // a multiset, not a set
  CHECK(orbit_signature({}, {a, b}) != exact_signature({a, b}));          // domain-separated

  PatchKey k{c, exact_signature({a, b}), "full", 16, 16};
  const std::string key = patch_key(k);
  CHECK(is_store_key(key));
  PatchKey other = k;
  other.rank_v = 8;
  CHECK(patch_key(other) != key);
  other = k;
  other.variant = "deep-only@2";
  CHECK(patch_key(other) != key);
  other = k;
  other.context_signature = orbit_signature({}, {a, b});
  CHECK(patch_key(other) != key);
  other = k;
  other.variant = "";
  CHECK_THROWS_WITH(patch_key(other), Contains("variant is empty"));
  other = k;
  other.chunk = "abc";
  CHECK_THROWS_WITH(patch_key(other), Contains("not a store key"));
}

TEST_CASE("the blob format round-trips every dtype and rejects tampering", "[store][cpu]") {
  std::vector<NamedTensor> tensors{
      {"f32", at::randn({3, 5})},
      {"f16", at::randn({4}).to(at::kHalf)},
      {"bf16", at::randn({2, 2, 2}).to(at::kBFloat16)},
      {"f64", at::randn({1}, at::kDouble)},
      {"i64", at::arange(7, at::kLong)},
      {"i32", at::arange(3, at::kInt)},
      {"u8", at::arange(9, at::kByte)},
      {"bool", at::arange(4, at::kLong).remainder(2).to(at::kBool)},
      {"empty", at::empty({0, 4})},
      {"scalar", at::scalar_tensor(3.5)},
  };
  const ValuePtr value = make_value(EntryKind::kPatch, tensors, {{"a", "1"}, {"b", "two"}});
  const std::string key = test::store_test_key(1);
  const EncodedBlob blob = encode_blob(key, "fp", *value, BlobEncoding::kExact);
  CHECK(blob.size() == encoded_blob_size(key, "fp", *value, BlobEncoding::kExact));
  std::string file = blob.head;
  for (const auto& [p, n] : blob.pieces) file.append(reinterpret_cast<const char*>(p), n);
  file += sha256_hex(file);
  REQUIRE(file.size() == blob.size());
  auto as_tensor = [](const std::string& bytes) {
    return at::from_blob(const_cast<char*>(bytes.data()), {static_cast<int64_t>(bytes.size())}, at::kByte).clone();
  };
  Result<DecodedBlob> decoded = decode_blob(as_tensor(file), "", "mem");
  REQUIRE(decoded.is_ok());
  CHECK(decoded.value().key == key);
  CHECK(decoded.value().model_fingerprint == "fp");
  CHECK(values_equal(*decoded.value().value, *value));

  // Any flipped byte fails the checksum; truncation fails; a wrong expected checksum fails.
  for (std::size_t at : {std::size_t{3}, std::size_t{100}, file.size() / 2, file.size() - 70, file.size() - 1}) {
    std::string bad = file;
    bad[at] = static_cast<char>(bad[at] ^ 0x40);
    Result<DecodedBlob> r = decode_blob(as_tensor(bad), "", "mem");
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == StatusCode::kNotFound);
    CHECK_THAT(r.status().reason(), Contains("corrupt blob mem"));
  }
  CHECK_FALSE(decode_blob(as_tensor(file.substr(0, file.size() - 10)), "", "mem").is_ok());
  CHECK_FALSE(decode_blob(as_tensor(file.substr(0, 20)), "", "mem").is_ok());
  CHECK_THAT(decode_blob(as_tensor(file), std::string(64, 'a'), "mem").status().reason(),
             Contains("differs from the index"));
}

TEST_CASE("the disk tier persists entries across reopening and checks the fingerprint", "[store][cpu]") {
  test::TempDir dir;
  {
    ChunkStore store(disk_options(dir.path().string()));
    for (int64_t i = 1; i <= 6; ++i) REQUIRE(store.put(test::store_test_key(i), test::store_test_value(i)).is_ok());
    REQUIRE(store.pin(test::store_test_key(2)).is_ok());
    {  // a second store object (as another process would) opens the same directory and sees every entry
      ChunkStore second(disk_options(dir.path().string()));
      for (int64_t i = 1; i <= 6; ++i) CHECK(second.contains(test::store_test_key(i)));
    }
    // The pin is a lease of the live owner: `store ls` shows it.
    for (const StoreEntryInfo& e : list_store(dir.path().string()))
      CHECK(e.pinned == (e.key == test::store_test_key(2)));
    store.verify_integrity(/*deep=*/true);
  }
  {
    ChunkStore store(disk_options(dir.path().string()));
    store.verify_integrity(true);
    for (int64_t i = 1; i <= 6; ++i) {
      CHECK(store.residence(test::store_test_key(i)) == StoreTier::kDisk);
      Result<ValuePtr> v = store.get(test::store_test_key(i));
      REQUIRE(v.is_ok());
      CHECK(values_equal(*v.value(), *test::store_test_value(i)));
      CHECK(store.residence(test::store_test_key(i)) == StoreTier::kHost);  // promoted on access
    }
    CHECK(store.stats().tiers[2].pinned_entries == 0);  // pins lapse with the process (object) that held them
    CHECK_FALSE(store.get(test::store_test_key(99)).is_ok());
  }
  ChunkStoreOptions other = disk_options(dir.path().string());
  other.model_fingerprint = "another-model";
  CHECK_THROWS_WITH(ChunkStore(other), Contains("model fingerprint " + test::kStoreTestFingerprint) &&
                                           Contains("another-model") && Contains(dir.path().string()));
  CHECK_THROWS_WITH(summarize_store((dir.path() / "nope").string()), Contains("nope: does not exist"));
  { std::ofstream((dir.path() / "a-file").string()) << "{}"; }
  CHECK_THROWS_WITH(summarize_store((dir.path() / "a-file").string()),
                    Contains("a-file: is a file, not a store directory"));
  // repair says the same (it said "no blobs/ directory: nothing to repair" for both).
  CHECK_THROWS_WITH(repair_store((dir.path() / "nope").string()), Contains("nope: does not exist"));
  CHECK_THROWS_WITH(repair_store((dir.path() / "a-file").string()),
                    Contains("a-file: is a file, not a store directory"));
  std::filesystem::create_directories(dir.path() / "empty");
  CHECK_THROWS_WITH(summarize_store((dir.path() / "empty").string()), Contains("empty: not an orbit store"));
}

TEST_CASE("orbit store ls, stat, verify and gc", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  {
    ChunkStore store(disk_options(d));
    for (int64_t i = 1; i <= 4; ++i) REQUIRE(store.put(test::store_test_key(i), test::store_test_value(i)).is_ok());
    // Busy while open: gc refuses.
    Run busy = run(std::string(ORBIT_CLI_PATH) + " store gc --store " + d);
    CHECK(busy.status == 1);
    CHECK_THAT(busy.out, Contains("is open (an engine or store in this or another process holds it)"));
  }
  const std::string cli = std::string(ORBIT_CLI_PATH) + " store ";
  Run ls = run(cli + "ls --json --store " + d);
  REQUIRE(ls.status == 0);
  auto entries = nlohmann::json::parse(ls.out);
  REQUIRE(entries.size() == 4);
  CHECK(entries[0]["kind"] == "canonical");

  Run stat = run(cli + "stat --json --store " + d);
  REQUIRE(stat.status == 0);
  auto s = nlohmann::json::parse(stat.out);
  CHECK(s["model_fingerprint"] == test::kStoreTestFingerprint);
  CHECK(s["tiers"]["disk"]["entries"] == 4);
  CHECK(s["unreferenced_blobs"] == 0);

  Run clean = run(cli + "verify --store " + d);
  CHECK(clean.status == 0);
  CHECK_THAT(clean.out, Contains("4 entries checked, 0 bad"));

  // Debris of a crash: a temp file and a blob no row names. Then one corrupt blob.
  const std::filesystem::path sub = dir.path() / "blobs" / "zz";
  std::filesystem::create_directories(sub);
  std::ofstream(sub / ".orphan.blob.tmp") << "partial";
  std::ofstream(sub / "orphan.blob") << "whole but unreferenced";
  // A temp file that is a symlink out of the store: gc removes the link, never its target, and frees no bytes
  // of it (its freed_bytes counted the target's).
  std::ofstream(dir.path() / "outside") << std::string(10000, 'x');
  std::filesystem::create_symlink(dir.path() / "outside", sub / ".linked.blob.tmp");
  const std::string victim = entries[1]["blob"];
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  Run bad = run(cli + "verify --store " + d);
  CHECK(bad.status == 1);
  CHECK_THAT(bad.out, Contains("BAD " + entries[1]["key"].get<std::string>()) && Contains(victim) &&
                          Contains("checksum") && Contains("1 unreferenced blobs (") && Contains("repair restores") &&
                          Contains("2 temp files"));
  {  // The BAD line names the blob once ("... <path>: corrupt: checksum mismatch ..."), not again in its reason.
    const std::size_t at = bad.out.find("BAD ");
    const std::string line = bad.out.substr(at, bad.out.find('\n', at) - at);
    CHECK(line.find(victim) == line.rfind(victim));
    CHECK_THAT(line, Contains(victim + ": corrupt: checksum"));
  }
  Run dry = run(cli + "gc --dry-run --store " + d);
  CHECK(dry.status == 0);
  CHECK(std::filesystem::exists(sub / "orphan.blob"));
  Run gc = run(cli + "gc --json --store " + d);
  REQUIRE(gc.status == 0);
  auto g = nlohmann::json::parse(gc.out);
  CHECK(g["removed_blobs"] == 1);
  CHECK(g["removed_temps"] == 2);
  CHECK(g["freed_bytes"] == std::string("partial").size() + std::string("whole but unreferenced").size());
  CHECK_FALSE(std::filesystem::exists(sub / "orphan.blob"));
  CHECK_FALSE(std::filesystem::is_symlink(sub / ".linked.blob.tmp"));
  CHECK(std::filesystem::file_size(dir.path() / "outside") == 10000);
  CHECK(std::filesystem::exists(victim));  // corrupt entries are reported, never deleted
  CHECK(run(cli + "verify --store " + d).status == 1);
  CHECK(run(cli + "frobnicate --store " + d).status == 2);  // an unknown subcommand, as an unknown command
}

TEST_CASE("an empty, truncated or garbage index beside blobs is refused, and orbit store repair rebuilds it",
          "[store][cpu]") {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const std::string d = dir.path().string();
  const std::string index = d + "/index.sqlite";
  test::write_entries(d, 12);
  for (const char* f : {"-wal", "-shm"}) fs::remove(index + f);
  REQUIRE(fs::file_size(index) > 4096);
  SECTION("empty") { fs::resize_file(index, 0); }
  SECTION("truncated to its first page") { fs::resize_file(index, 4096); }
  SECTION("a garbage header") {
    std::fstream f(index, std::ios::in | std::ios::out | std::ios::binary);
    f.write("this is not an SQLite file at all", 32);
  }
  const auto blob_files = [&] {
    int64_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(d + "/blobs")) n += e.path().extension() == ".blob";
    return n;
  };
  CHECK_THROWS_WITH(ChunkStore(disk_options(d)), Contains(index) && Contains("orbit store repair --store " + d));
  CHECK_THROWS_WITH(gc_store(d), Contains("orbit store repair"));  // it would delete every blob as garbage
  CHECK_THROWS_WITH(list_store(d), Contains("orbit store repair"));
  CHECK(blob_files() == 12);

  const Run repair = test::cli("store repair --store " + d);
  INFO(repair.out);
  REQUIRE(repair.status == 0);
  CHECK_THAT(repair.out, Contains("12 rows restored"));
  ChunkStore store(disk_options(d));
  for (int64_t i = 1; i <= 12; ++i) {
    Result<ValuePtr> v = store.get(test::store_test_key(i));
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  CHECK(verify_store(d).clean());
}

// Engines may have the store open while verify runs: an entry evicted or erased between verify's read of the
// rows and its read of the blob is gone by design, not damage. verify_rows is handed rows read before an
// erase, as verify_store would hold them.
TEST_CASE("verify leaves out a row erased after it read the rows, and still finds a lost blob", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  {
    ChunkStore store(disk_options(d));
    for (int64_t i = 1; i <= 3; ++i) REQUIRE(store.put(test::store_test_key(i), test::store_test_value(i)).is_ok());
  }
  SqliteIndex index(d + "/index.sqlite", SqliteIndex::Mode::kReadOnly);
  const std::vector<DiskRow> rows = index.rows();
  REQUIRE(rows.size() == 3);
  const std::string fingerprint = index.meta("model_fingerprint").value_or("");
  {
    ChunkStore store(disk_options(d));
    REQUIRE(store.erase(test::store_test_key(1)).is_ok());
  }
  VerifyReport report = verify_rows(index, d, fingerprint, rows);
  CHECK(report.problems.empty());
  CHECK(report.unreadable.empty());
  CHECK(report.checked == 2);

  // A blob lost under a row the index still holds is damage, as before.
  const auto kept =
      std::find_if(rows.begin(), rows.end(), [](const DiskRow& r) { return r.key == test::store_test_key(2); });
  REQUIRE(kept != rows.end());
  REQUIRE(std::filesystem::remove(std::filesystem::path(d) / kept->blob));
  report = verify_rows(index, d, fingerprint, rows);
  REQUIRE(report.problems.size() == 1);
  CHECK(report.problems[0].key == test::store_test_key(2));
  CHECK_THAT(report.problems[0].reason, Contains("missing"));
  CHECK(report.checked == 2);
}

}  // namespace ORBIT_TEST_FILE
