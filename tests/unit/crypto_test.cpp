// The client's key material and block sealing, against libsodium directly
// and against tampering: Secret, the Argon2id key wrap, BlockSealer, private
// files and passphrase sources.
#include <gtest/gtest.h>
#include <sodium.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "oramcore/base/private_file.h"
#include "oramcore/base/random.h"
#include "oramcore/base/secret.h"
#include "oramcore/crypto/block_seal.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/passphrase.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

namespace stdfs = std::filesystem;

Secret Pass(std::string_view s) { return Secret::CopyOf(s); }

FsId RandomFsId() {
  FsId id;
  random::Bytes(id);
  return id;
}

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/s3oram-crypto-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    stdfs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static Status Write(const std::string& path, std::string_view text) {
    return WritePrivateFile(
        path, std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
  }
  std::string dir_;
};

TEST(SecretTest, CopiesMovesAndComparesInConstantTime) {
  Secret a = Pass("hunter2");
  EXPECT_EQ(a.size(), 7u);
  Secret b = Pass("hunter2");
  Secret c = Pass("hunter3");
  EXPECT_TRUE(a.Equals(b));
  EXPECT_FALSE(a.Equals(c));
  EXPECT_FALSE(a.Equals(Pass("hunter")));
  Secret moved = std::move(a);
  EXPECT_TRUE(moved.Equals(b));
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  Secret zeros(16);
  for (std::uint8_t x : zeros.bytes()) EXPECT_EQ(x, 0);
}

TEST(KeyWrapTest, RoundTripsAndRefusesWrongPassphraseOrFilesystem) {
  const FsId fs = RandomFsId();
  Secret master = NewMasterKey();
  auto wrap = WrapMasterKey(master, Pass("right"), fs, MinimalKdfParams());
  ASSERT_TRUE(wrap.ok()) << wrap.status().ToString();
  auto back = UnwrapMasterKey(*wrap, Pass("right"), fs);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->Equals(master));

  auto wrong = UnwrapMasterKey(*wrap, Pass("wrong"), fs);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(wrong.status().message().find("wrong passphrase"), std::string::npos);

  auto other_fs = UnwrapMasterKey(*wrap, Pass("right"), RandomFsId());
  EXPECT_EQ(other_fs.status().code(), Status::Code::kPermissionDenied);

  // Lowering the stored cost (an attacker editing the state) breaks the wrap.
  KeyWrap cheaper = *wrap;
  cheaper.kdf.ops += 1;
  EXPECT_EQ(UnwrapMasterKey(cheaper, Pass("right"), fs).status().code(),
            Status::Code::kPermissionDenied);
  // Any flipped bit of the record is refused.
  for (std::size_t i = 0; i < wrap->sealed.size(); i += 7) {
    KeyWrap flipped = *wrap;
    flipped.sealed[i] ^= 0x10;
    EXPECT_FALSE(UnwrapMasterKey(flipped, Pass("right"), fs).ok()) << i;
  }
  KeyWrap salted = *wrap;
  salted.salt[3] ^= 1;
  EXPECT_FALSE(UnwrapMasterKey(salted, Pass("right"), fs).ok());

  // Two wraps of one key differ (fresh salt and nonce).
  auto again = WrapMasterKey(master, Pass("right"), fs, MinimalKdfParams());
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->salt, wrap->salt);
  EXPECT_NE(again->sealed, wrap->sealed);
}

TEST(KeyWrapTest, KdfParamsAreValidated) {
  EXPECT_TRUE(ValidateKdfParams(DefaultKdfParams()).ok());
  EXPECT_TRUE(ValidateKdfParams(MinimalKdfParams()).ok());
  EXPECT_FALSE(ValidateKdfParams(KdfParams{0, 1 << 20}).ok());
  EXPECT_FALSE(ValidateKdfParams(KdfParams{1, 1024}).ok());
  EXPECT_FALSE(ValidateKdfParams(KdfParams{1, std::uint64_t{1} << 40}).ok());
  EXPECT_FALSE(WrapMasterKey(NewMasterKey(), Pass("p"), RandomFsId(), KdfParams{0, 0}).ok());
}

TEST(KeyWrapTest, CostsBelowOwaspsFloorAreNamed) {
  constexpr std::uint64_t MiB = 1 << 20;
  EXPECT_TRUE(CheckKdfFloor(DefaultKdfParams()).ok());
  // OWASP's five settings are each accepted...
  for (auto [ops, mem] : {std::pair<std::uint64_t, std::uint64_t>{1, 46}, {2, 19}, {3, 12},
                          {4, 9}, {5, 7}}) {
    EXPECT_TRUE(CheckKdfFloor(KdfParams{ops, mem * MiB}).ok()) << ops << " x " << mem << " MiB";
  }
  // ...and a step below each is refused.
  for (auto [ops, mem] : {std::pair<std::uint64_t, std::uint64_t>{1, 45}, {2, 17}, {3, 11},
                          {4, 8}, {5, 6}, {100, 6}}) {
    auto st = CheckKdfFloor(KdfParams{ops, mem * MiB});
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << ops << " x " << mem << " MiB";
    EXPECT_NE(st.message().find("--insecure-kdf"), std::string::npos) << st.ToString();
  }
  EXPECT_FALSE(CheckKdfFloor(MinimalKdfParams()).ok());
  EXPECT_FALSE(CheckKdfFloor(KdfParams{0, 64 * MiB}).ok());
}

// During a master-key rotation a sealer opens blocks of the previous key
// (same binding to id and version) but seals under the current one only.
TEST(BlockSealTest, APreviousKeyOpensUntilItIsForgotten) {
  const FsId fs = RandomFsId();
  const Secret old_master = NewMasterKey();
  const Secret new_master = NewMasterKey();
  BlockSealer old_sealer(old_master, fs);
  BlockSealer sealer(new_master, fs);
  const std::vector<std::uint8_t> plain(512, 0x3c);
  std::vector<std::uint8_t> old_sealed(plain.size() + kSealOverhead);
  old_sealer.Seal(9, 4, plain, old_sealed);
  std::vector<std::uint8_t> out(plain.size());
  EXPECT_FALSE(sealer.Open(9, 4, old_sealed, out));
  sealer.AcceptPrevious(old_master);
  ASSERT_TRUE(sealer.Open(9, 4, old_sealed, out));
  EXPECT_EQ(out, plain);
  EXPECT_FALSE(sealer.Open(9, 3, old_sealed, out)) << "an older version opened";
  EXPECT_FALSE(sealer.Open(8, 4, old_sealed, out)) << "another block's seal opened";
  std::vector<std::uint8_t> new_sealed(plain.size() + kSealOverhead);
  sealer.Seal(9, 5, plain, new_sealed);
  EXPECT_FALSE(old_sealer.Open(9, 5, new_sealed, out)) << "sealed under the previous key";
  ASSERT_TRUE(sealer.Open(9, 5, new_sealed, out));
  sealer.ForgetPrevious();
  EXPECT_FALSE(sealer.Open(9, 4, old_sealed, out));
  EXPECT_TRUE(sealer.Open(9, 5, new_sealed, out));
}

TEST(BlockSealTest, RoundTripsAndDetectsEveryTamperingKind) {
  auto rng = testing::SeededRng();
  const FsId fs = RandomFsId();
  Secret master = NewMasterKey();
  BlockSealer sealer(master, fs);
  std::vector<std::uint8_t> plain(4096);
  for (auto& b : plain) b = static_cast<std::uint8_t>(rng());
  std::vector<std::uint8_t> sealed(plain.size() + kSealOverhead);
  sealer.Seal(42, 7, plain, sealed);
  std::vector<std::uint8_t> out(plain.size());
  ASSERT_TRUE(sealer.Open(42, 7, sealed, out));
  EXPECT_EQ(out, plain);
  // The ciphertext does not contain the plaintext.
  EXPECT_EQ(std::search(sealed.begin(), sealed.end(), plain.begin(), plain.begin() + 32),
            sealed.end());

  // Another block's answer, an older version, another filesystem, another key.
  EXPECT_FALSE(sealer.Open(43, 7, sealed, out));
  EXPECT_FALSE(sealer.Open(42, 6, sealed, out));
  EXPECT_FALSE(sealer.Open(42, 8, sealed, out));
  EXPECT_EQ(out, std::vector<std::uint8_t>(plain.size(), 0));  // zeroed on failure
  EXPECT_FALSE(BlockSealer(master, RandomFsId()).Open(42, 7, sealed, out));
  EXPECT_FALSE(BlockSealer(NewMasterKey(), fs).Open(42, 7, sealed, out));
  // Every single-bit flip, over a sample of positions covering nonce, body and tag.
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::uint8_t> t = sealed;
    // First every nonce byte, then every tag byte, then random positions.
    const auto k = static_cast<std::size_t>(trial);
    const std::size_t pos = k < kSealNonceBytes                   ? k
                            : k < kSealNonceBytes + kSealTagBytes ? sealed.size() - kSealOverhead + k
                                                                  : rng() % sealed.size();
    t[pos] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    ASSERT_FALSE(sealer.Open(42, 7, t, out)) << "flip at " << pos;
  }
  // Sealing twice gives different ciphertexts (random nonces).
  std::vector<std::uint8_t> again(sealed.size());
  sealer.Seal(42, 7, plain, again);
  EXPECT_NE(again, sealed);
  std::set<std::vector<std::uint8_t>> nonces;
  for (int i = 0; i < 1000; ++i) {
    sealer.Seal(1, 1, plain, again);
    nonces.insert(std::vector<std::uint8_t>(again.begin(), again.begin() + kSealNonceBytes));
  }
  EXPECT_EQ(nonces.size(), 1000u);
}

TEST_F(TempDirTest, PrivateFilesMustBePrivateRegularFiles) {
  ASSERT_TRUE(Write(Path("key"), "secret bytes").ok());
  struct stat st;
  ASSERT_EQ(::stat(Path("key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto r = ReadPrivateFile(Path("key"), 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->Equals(Pass("secret bytes")));
  EXPECT_EQ(Write(Path("key"), "x").code(), Status::Code::kAlreadyExists);

  for (mode_t mode : {0640, 0604, 0660, 0644, 0700 | 0040}) {
    ASSERT_EQ(::chmod(Path("key").c_str(), mode), 0);
    auto loose = ReadPrivateFile(Path("key"), 100);
    ASSERT_FALSE(loose.ok()) << std::oct << mode;
    EXPECT_EQ(loose.status().code(), Status::Code::kPermissionDenied);
    EXPECT_NE(loose.status().message().find("chmod 600"), std::string::npos);
  }
  ASSERT_EQ(::chmod(Path("key").c_str(), 0400), 0);
  EXPECT_TRUE(ReadPrivateFile(Path("key"), 100).ok());

  ASSERT_EQ(::symlink(Path("key").c_str(), Path("link").c_str()), 0);
  EXPECT_FALSE(ReadPrivateFile(Path("link"), 100).ok());
  EXPECT_FALSE(ReadPrivateFile(dir_, 100).ok());  // a directory
  EXPECT_EQ(ReadPrivateFile(Path("missing"), 100).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(ReadPrivateFile(Path("key"), 5).status().code(), Status::Code::kInvalidArgument);
}

TEST_F(TempDirTest, PassphraseSources) {
  ASSERT_TRUE(Write(Path("nl"), "with newline\n").ok());
  ASSERT_TRUE(Write(Path("crlf"), "with crlf\r\n").ok());
  ASSERT_TRUE(Write(Path("two"), "two newlines\n\n").ok());
  ASSERT_TRUE(Write(Path("empty"), "\n").ok());
  auto nl = ReadPassphrase(PassphraseSource{Path("nl"), "", false}, "");
  ASSERT_TRUE(nl.ok());
  EXPECT_TRUE(nl->Equals(Pass("with newline")));
  auto crlf = ReadPassphrase(PassphraseSource{Path("crlf"), "", false}, "");
  ASSERT_TRUE(crlf.ok());
  EXPECT_TRUE(crlf->Equals(Pass("with crlf")));
  auto two = ReadPassphrase(PassphraseSource{Path("two"), "", false}, "");
  ASSERT_TRUE(two.ok());
  EXPECT_TRUE(two->Equals(Pass("two newlines\n")));  // only one newline is stripped
  EXPECT_EQ(ReadPassphrase(PassphraseSource{Path("empty"), "", false}, "").status().code(),
            Status::Code::kInvalidArgument);

  // The environment variable is read once and wiped.
  ASSERT_EQ(::setenv("S3ORAM_TEST_PASS", "from env", 1), 0);
  char* value = std::getenv("S3ORAM_TEST_PASS");
  ASSERT_NE(value, nullptr);
  auto env = ReadPassphrase(PassphraseSource{"", "S3ORAM_TEST_PASS", false}, "");
  ASSERT_TRUE(env.ok());
  EXPECT_TRUE(env->Equals(Pass("from env")));
  EXPECT_EQ(std::getenv("S3ORAM_TEST_PASS"), nullptr);
  // A file wins over the environment.
  ASSERT_EQ(::setenv("S3ORAM_TEST_PASS", "from env", 1), 0);
  auto both = ReadPassphrase(PassphraseSource{Path("nl"), "S3ORAM_TEST_PASS", false}, "");
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE(both->Equals(Pass("with newline")));
  ::unsetenv("S3ORAM_TEST_PASS");

  // Nothing to read and no prompt allowed: says how to give one.
  auto none = ReadPassphrase(PassphraseSource{"", "S3ORAM_TEST_PASS", false}, "");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("--passfile"), std::string::npos);
}

TEST_F(TempDirTest, CurveKeyFilesAndPublicKeyResolution) {
  auto k = GenerateCurveKeypair();
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(WriteCurveKeypair(*k, Path("node")).ok());
  EXPECT_EQ(WriteCurveKeypair(*k, Path("node")).code(), Status::Code::kAlreadyExists);
  auto loaded = LoadCurveKeypair(Path("node.key"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->public_key, k->public_key);
  EXPECT_TRUE(loaded->secret_key.Equals(k->secret_key));
  auto secret = DecodeSecretKey(*loaded);
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ(secret->size(), 32u);

  // Inline keys and .pub files both resolve; an inline key is never taken
  // as a path, even when a file of that name exists.
  auto inline_key = ResolvePublicKey(k->public_key, "k");
  ASSERT_TRUE(inline_key.ok());
  EXPECT_EQ(*inline_key, k->public_key);
  auto from_file = ResolvePublicKey(Path("node.pub"), "k");
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(*from_file, k->public_key);
  ASSERT_EQ(::chmod(Path("node.pub").c_str(), 0666), 0);
  EXPECT_FALSE(ResolvePublicKey(Path("node.pub"), "k").ok());  // writable by others
  EXPECT_FALSE(ResolvePublicKey(Path("missing.pub"), "k").ok());

  // Z85 validity: length, alphabet, and no NUL hiding a short key.
  EXPECT_TRUE(CheckZ85Key(k->public_key, "k").ok());
  EXPECT_FALSE(CheckZ85Key(k->public_key.substr(0, 39), "k").ok());
  std::string with_nul = k->public_key;
  with_nul[5] = '\0';
  EXPECT_FALSE(CheckZ85Key(with_nul, "k").ok());
  EXPECT_FALSE(CheckZ85Key(std::string(40, ' '), "k").ok());

  // A secret key file readable by others is refused.
  ASSERT_EQ(::chmod(Path("node.key").c_str(), 0644), 0);
  EXPECT_EQ(LoadCurveKeypair(Path("node.key")).status().code(), Status::Code::kPermissionDenied);
}

TEST_F(TempDirTest, PrivateFileRefusesAFifoWithoutBlocking) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  auto r = ReadPrivateFile(Path("fifo"), 100);  // must return, not wait for a writer
  EXPECT_FALSE(r.ok());
}

TEST_F(TempDirTest, EnvironmentPassphraseIsWipedEvenWhenAFileIsUsed) {
  ASSERT_TRUE(Write(Path("p"), "from file").ok());
  ASSERT_EQ(::setenv("S3ORAM_TEST_PASS2", "from env", 1), 0);
  auto r = ReadPassphrase(PassphraseSource{Path("p"), "S3ORAM_TEST_PASS2", false}, "");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->Equals(Pass("from file")));
  EXPECT_EQ(std::getenv("S3ORAM_TEST_PASS2"), nullptr);
}

}  // namespace
}  // namespace s3oram
