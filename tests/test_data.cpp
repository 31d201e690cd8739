// Tests for data/: tokenizer, vocabulary, CSR and bag batches, TSV reading, splits.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <tapegrad/data/batch.hpp>
#include <tapegrad/data/file_error.hpp>
#include <tapegrad/data/split.hpp>
#include <tapegrad/data/tokenizer.hpp>
#include <tapegrad/data/tsv.hpp>
#include <tapegrad/data/vocabulary.hpp>

#include "helpers.hpp"

using namespace tg::data;
using tg::check_csr;
using tg::CsrBatch;
using Strings = std::vector<std::string>;
using Ids = std::vector<std::int64_t>;
using tg::test::read_file;

namespace {

const std::string source_dir = TAPEGRAD_SOURCE_DIR;

// A file in the temp directory holding `content`, removed when the test ends.
// The process id in the name keeps two test runs at once from sharing files.
class TempFile {
 public:
  explicit TempFile(const std::string& content, const std::string& name = "file.txt") {
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() / ("tapegrad_test_data_" + std::to_string(::getpid()) +
                                                       "_" + std::to_string(counter++) + "_" + name))
                .string();
    std::ofstream out(path_, std::ios::binary);
    out << content;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The line number a FileError carries, or -1 when the call does not throw one.
template <typename F>
std::int64_t error_line(F&& call) {
  try {
    call();
  } catch (const FileError& e) {
    return e.line();
  }
  return -1;
}

}  // namespace

TEST_SUITE("data") {
  // ---------------------------------------------------------------- tokenizer

  TEST_CASE("tokenize: lower-cased runs of letters and digits") {
    CHECK(tokenize("Hello, World! 42 times") == Strings{"hello", "world", "42", "times"});
    CHECK(tokenize("abc123def 4x4 under_score") == Strings{"abc123def", "4x4", "under", "score"});
    CHECK(tokenize("FREE free Free") == Strings{"free", "free", "free"});
  }

  TEST_CASE("tokenize: empty text and text of separators only give no tokens") {
    CHECK(tokenize("").empty());
    CHECK(tokenize(" \t\r\n,.;:!?-_()[]{}<>@#$%^&*~`'\"/\\|").empty());
  }

  TEST_CASE("tokenize: keep_case keeps upper-case letters") {
    TokenizerOptions options;
    options.keep_case = true;
    CHECK(tokenize("Hello WORLD x", options) == Strings{"Hello", "WORLD", "x"});
  }

  TEST_CASE("tokenize: tokens outside [min_length, max_length] are dropped, not cut") {
    TokenizerOptions options;
    options.min_length = 2;
    options.max_length = 4;
    CHECK(tokenize("a bb ccc dddd eeeee 12345 99", options) == Strings{"bb", "ccc", "dddd", "99"});
    // The default max_length drops a 33-character run but keeps a 32-character one.
    CHECK(tokenize(std::string(32, 'a') + " " + std::string(33, 'b')) == Strings{std::string(32, 'a')});
  }

  TEST_CASE("tokenize: bad length options throw std::invalid_argument") {
    TokenizerOptions zero;
    zero.min_length = 0;
    CHECK_THROWS_WITH_AS(tokenize("x", zero),
                         "tokenize: need 1 <= min_length <= max_length, got min_length=0, max_length=32",
                         std::invalid_argument);
    TokenizerOptions reversed;
    reversed.min_length = 5;
    reversed.max_length = 4;
    CHECK_THROWS_AS(tokenize("x", reversed), std::invalid_argument);
  }

  TEST_CASE("tokenize: bytes >= 0x80, valid UTF-8 or not, separate tokens") {
    CHECK(tokenize("caf\xC3\xA9 ok") == Strings{"caf", "ok"});
    CHECK(tokenize("\xFF\xFE").empty());
    CHECK(tokenize("ab\xFF"
                   "cd") == Strings{"ab", "cd"});
    // A multi-byte sequence cut off at the very end of the text.
    CHECK(tokenize("abc\xE2\x82") == Strings{"abc"});
    CHECK(tokenize("\xF0\x9F\x98").empty());
    CHECK(tokenize("x\x80") == Strings{"x"});
    // An embedded NUL is a separator like any other byte.
    CHECK(tokenize(std::string_view("a\0b", 3)) == Strings{"a", "b"});
  }

  TEST_CASE("tokenize_all: one token list per text") {
    CHECK(tokenize_all({"Hi there", "", "FREE!!"}) == std::vector<Strings>{{"hi", "there"}, {}, {"free"}});
  }

  TEST_CASE("tokenize: every byte value at once") {
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    // The only runs are the digits, 'A'..'Z' (lower-cased) and 'a'..'z'.
    CHECK(tokenize(all) == Strings{"0123456789", "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"});
  }

  TEST_CASE("valid_utf8: well-formed text") {
    CHECK(valid_utf8(""));
    CHECK(valid_utf8("plain ascii"));
    CHECK(valid_utf8("caf\xC3\xA9"));
    CHECK(valid_utf8("\xE2\x82\xAC"));      // U+20AC euro sign
    CHECK(valid_utf8("\xF0\x9F\x98\x80"));  // U+1F600, four bytes
    CHECK(valid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF, the last code point
    CHECK(valid_utf8(std::string_view("\0", 1)));
  }

  TEST_CASE("valid_utf8: malformed text") {
    CHECK_FALSE(valid_utf8("\xFF\xFE"));
    CHECK_FALSE(valid_utf8("\x80"));              // continuation byte with no lead
    CHECK_FALSE(valid_utf8("\xC3"));              // truncated 2-byte sequence
    CHECK_FALSE(valid_utf8("abc\xE2\x82"));       // truncated 3-byte sequence at the end
    CHECK_FALSE(valid_utf8("\xF0\x9F\x98"));      // truncated 4-byte sequence
    CHECK_FALSE(valid_utf8("\xC3(x"));            // lead byte followed by ASCII
    CHECK_FALSE(valid_utf8("\xC0\xAF"));          // overlong '/'
    CHECK_FALSE(valid_utf8("\xE0\x80\xAF"));      // overlong '/', 3 bytes
    CHECK_FALSE(valid_utf8("\xED\xA0\x80"));      // U+D800, a surrogate
    CHECK_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // U+110000, past the last code point
    CHECK(first_invalid_utf8("ab\xFF"
                             "cd") == 2);
    CHECK(first_invalid_utf8("caf\xC3\xA9\xC3") == 5);
    CHECK(first_invalid_utf8("fine") == 4);
  }

  // ---------------------------------------------------------------- vocabulary

  TEST_CASE("Vocabulary: ids by document frequency, <unk> first") {
    // Document frequencies: a 3, c 2, b 1. "a" twice in one document counts once.
    std::vector<Strings> docs = {{"b", "a", "a"}, {"a", "c"}, {"c", "a"}};
    Vocabulary vocab = Vocabulary::build(docs);
    CHECK(vocab.size() == 4);
    CHECK(vocab.token(0) == "<unk>");
    CHECK(vocab.token(1) == "a");
    CHECK(vocab.token(2) == "c");
    CHECK(vocab.token(3) == "b");
    CHECK(vocab.find("c") == 2);
    CHECK_FALSE(vocab.find("zzz").has_value());
    CHECK(vocab.encode({"b", "zzz", "a"}) == Ids{3, 0, 1});
    CHECK(vocab.encode_all({{"c"}, {}, {"zzz", "b"}}) == std::vector<Ids>{{2}, {}, {0, 3}});
  }

  TEST_CASE("Vocabulary: min_df drops rare tokens") {
    std::vector<Strings> docs = {{"b", "a", "a"}, {"a", "c"}, {"c", "a"}};
    VocabularyOptions options;
    options.min_df = 2;
    Vocabulary vocab = Vocabulary::build(docs, options);
    CHECK(vocab.size() == 3);
    CHECK_FALSE(vocab.contains("b"));
    CHECK(vocab.encode({"b", "a", "c"}) == Ids{0, 1, 2});
    options.min_df = 4;
    CHECK(Vocabulary::build(docs, options).size() == 1);  // only <unk>
  }

  TEST_CASE("Vocabulary: the drop policy leaves unknown tokens out") {
    std::vector<Strings> docs = {{"b", "a", "a"}, {"a", "c"}, {"c", "a"}};
    VocabularyOptions options;
    options.min_df = 2;
    options.unknown = UnknownPolicy::drop;
    Vocabulary vocab = Vocabulary::build(docs, options);
    CHECK(vocab.size() == 2);
    CHECK(vocab.token(0) == "a");
    CHECK_FALSE(vocab.contains("<unk>"));
    CHECK(vocab.encode({"b", "a", "zzz", "c"}) == Ids{0, 1});
    CHECK(vocab.encode({"zzz"}).empty());
  }

  TEST_CASE("Vocabulary: equal frequencies are ordered by token, max_size keeps the first") {
    std::vector<Strings> docs = {{"pear"}, {"apple"}, {"fig"}};
    Vocabulary vocab = Vocabulary::build(docs);
    CHECK(vocab.token(1) == "apple");
    CHECK(vocab.token(2) == "fig");
    CHECK(vocab.token(3) == "pear");

    // df: y 2, z 2, w 1, x 1. Three places: y, z, then w wins the tie with x.
    std::vector<Strings> more = {{"x", "y", "z"}, {"z", "y"}, {"w"}};
    VocabularyOptions options;
    options.max_size = 3;
    Vocabulary limited = Vocabulary::build(more, options);
    CHECK(limited.size() == 4);  // max_size does not count <unk>
    CHECK(limited.token(1) == "y");
    CHECK(limited.token(2) == "z");
    CHECK(limited.token(3) == "w");
    CHECK_FALSE(limited.contains("x"));
  }

  TEST_CASE("Vocabulary: a literal <unk> in the documents does not get a second id") {
    std::vector<Strings> docs = {{"<unk>", "a"}, {"<unk>"}};
    Vocabulary vocab = Vocabulary::build(docs);
    CHECK(vocab.size() == 2);
    CHECK(vocab.find("<unk>") == 0);
  }

  TEST_CASE("Vocabulary: bad arguments throw") {
    std::vector<Strings> docs = {{"a"}};
    VocabularyOptions options;
    options.min_df = 0;
    CHECK_THROWS_WITH_AS(Vocabulary::build(docs, options), "Vocabulary::build: min_df must be >= 1, got 0",
                         std::invalid_argument);
    options = {};
    options.max_size = -1;
    CHECK_THROWS_AS(Vocabulary::build(docs, options), std::invalid_argument);
    CHECK_THROWS_WITH_AS(Vocabulary::build({{"a"}, {"b", ""}}),
                         "Vocabulary::build: document 1 has an empty token or one containing a line break",
                         std::invalid_argument);
    CHECK_THROWS_AS(Vocabulary::build({{"two\nlines"}}), std::invalid_argument);
    Vocabulary vocab = Vocabulary::build(docs);
    CHECK_THROWS_WITH_AS(vocab.token(2), "Vocabulary::token: id 2 outside [0, 2)", std::out_of_range);
    CHECK_THROWS_AS(vocab.token(-1), std::out_of_range);
  }

  TEST_CASE("Vocabulary: save and load round trip") {
    std::vector<Strings> docs = {{"spam", "free"}, {"free", "meeting"}, {"free"}};
    for (UnknownPolicy policy : {UnknownPolicy::map_to_unk, UnknownPolicy::drop}) {
      VocabularyOptions options;
      options.unknown = policy;
      Vocabulary vocab = Vocabulary::build(docs, options);
      TempFile file("", "vocab.txt");
      vocab.save(file.path());
      Vocabulary loaded = Vocabulary::load(file.path());
      CHECK(loaded.unknown_policy() == policy);
      REQUIRE(loaded.size() == vocab.size());
      for (std::int64_t id = 0; id < vocab.size(); ++id) CHECK(loaded.token(id) == vocab.token(id));
      CHECK(loaded.encode({"free", "nope"}) == vocab.encode({"free", "nope"}));
    }
    VocabularyOptions drop;
    drop.unknown = UnknownPolicy::drop;
    TempFile file("", "vocab.txt");
    Vocabulary::build(docs, drop).save(file.path());
    CHECK(read_file(file.path()) == "tapegrad-vocabulary 1 unknown=drop\nfree\nmeeting\nspam\n");
  }

  TEST_CASE("Vocabulary::load: CRLF line ends are accepted") {
    TempFile file("tapegrad-vocabulary 1 unknown=map_to_unk\r\n<unk>\r\nham\r\nspam\r\n");
    Vocabulary vocab = Vocabulary::load(file.path());
    CHECK(vocab.size() == 3);
    CHECK(vocab.find("spam") == 2);
  }

  TEST_CASE("Vocabulary::load: errors name the file and the line") {
    const std::string header = "tapegrad-vocabulary 1 unknown=map_to_unk\n";

    TempFile duplicate(header + "<unk>\nham\nspam\nham\n");
    CHECK_THROWS_WITH_AS(
        Vocabulary::load(duplicate.path()),
        ("vocabulary: " + duplicate.path() + ":5: duplicate token 'ham' (first on line 3)").c_str(),
        FileError);
    CHECK(error_line([&] { Vocabulary::load(duplicate.path()); }) == 5);

    TempFile empty_token(header + "<unk>\nham\n\nspam\n");
    CHECK_THROWS_WITH_AS(Vocabulary::load(empty_token.path()),
                         ("vocabulary: " + empty_token.path() + ":4: empty token").c_str(), FileError);

    TempFile no_unk(header + "ham\n");
    CHECK(error_line([&] { Vocabulary::load(no_unk.path()); }) == 2);
    TempFile header_only(header);
    CHECK(error_line([&] { Vocabulary::load(header_only.path()); }) == 2);

    TempFile empty("");
    CHECK_THROWS_WITH_AS(Vocabulary::load(empty.path()),
                         ("vocabulary: " + empty.path() + ":1: empty file, expected a header").c_str(),
                         FileError);
    TempFile not_a_vocabulary("ham\nspam\n");
    CHECK(error_line([&] { Vocabulary::load(not_a_vocabulary.path()); }) == 1);
    TempFile future("tapegrad-vocabulary 2 unknown=drop\nham\n");
    CHECK_THROWS_WITH_AS(
        Vocabulary::load(future.path()),
        ("vocabulary: " + future.path() + ":1: format version '2' is not supported (only 1)").c_str(),
        FileError);
    TempFile bad_policy("tapegrad-vocabulary 1 unknown=ignore\nham\n");
    CHECK(error_line([&] { Vocabulary::load(bad_policy.path()); }) == 1);

    const std::string missing = source_dir + "/tests/data/data_no_such_file.txt";
    CHECK_THROWS_WITH_AS(Vocabulary::load(missing),
                         ("vocabulary: " + missing + ": cannot open file for reading").c_str(), FileError);
    // A FileError is a std::runtime_error, so generic handlers catch it too.
    CHECK_THROWS_AS(Vocabulary::load(missing), std::runtime_error);
  }

  // ---------------------------------------------------------------- CSR batches

  TEST_CASE("to_csr: counts, duplicates merged, columns sorted, empty rows") {
    std::vector<Ids> docs = {{3, 1, 3, 3}, {}, {0, 2, 2}};
    CsrBatch batch = to_csr(docs, 4);
    CHECK(batch.rows() == 3);
    CHECK(batch.num_cols == 4);
    CHECK(batch.indptr == Ids{0, 2, 2, 4});
    CHECK(batch.indices == Ids{1, 3, 0, 2});
    CHECK(batch.values == std::vector<float>{1, 3, 1, 2});

    CsrBatch binary = to_csr(docs, 4, CsrValues::binary);
    CHECK(binary.indptr == batch.indptr);
    CHECK(binary.indices == batch.indices);
    CHECK(binary.values == std::vector<float>{1, 1, 1, 1});
  }

  TEST_CASE("to_csr: the rows std::map counts, for vocabularies of one to eight bytes, sorted input or not") {
    std::mt19937_64 rng(7);
    for (int64_t num_cols :
         {int64_t{1}, int64_t{200}, int64_t{70'000}, int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
      CAPTURE(num_cols);
      std::uniform_int_distribution<int64_t> common(0, std::min<int64_t>(num_cols - 1, 30));
      std::uniform_int_distribution<int64_t> any(0, num_cols - 1);
      std::vector<Ids> docs(20);
      for (std::size_t d = 0; d < docs.size(); ++d) {
        for (std::size_t k = 0; k < 5 * d; ++k) docs[d].push_back(k % 3 ? common(rng) : any(rng));
        if (d % 4 == 0) std::sort(docs[d].begin(), docs[d].end());
      }
      const CsrBatch batch = to_csr(docs, num_cols);
      REQUIRE(batch.rows() == 20);
      for (std::size_t d = 0; d < docs.size(); ++d) {
        std::map<int64_t, float> counts;
        for (int64_t id : docs[d]) ++counts[id];
        Ids ids;
        std::vector<float> values;
        for (auto [id, n] : counts) ids.push_back(id), values.push_back(n);
        const auto row = static_cast<std::ptrdiff_t>(batch.indptr[d]),
                   end = static_cast<std::ptrdiff_t>(batch.indptr[d + 1]);
        CHECK(Ids(batch.indices.begin() + row, batch.indices.begin() + end) == ids);
        CHECK(std::vector<float>(batch.values.begin() + row, batch.values.begin() + end) == values);
      }
    }
  }

  TEST_CASE("to_csr: no documents give a batch of zero rows") {
    CsrBatch batch = to_csr({}, 5);
    CHECK(batch.rows() == 0);
    CHECK(batch.indptr == Ids{0});
    CHECK(batch.nnz() == 0);
  }

  TEST_CASE("to_csr: ids outside [0, num_cols) throw and name the document") {
    CHECK_THROWS_WITH_AS(to_csr({{0, 1}, {2, 3, 4}}, 4),
                         "to_csr: document 1, position 2: token id 4 outside [0, 4)", std::invalid_argument);
    CHECK_THROWS_AS(to_csr({{-1}}, 4), std::invalid_argument);
    CHECK_THROWS_AS(to_csr({}, -1), std::invalid_argument);
    CHECK_THROWS_AS(to_csr({{0}}, 0), std::invalid_argument);
  }

  TEST_CASE("Tfidf: scikit-learn's smooth idf and l2-normalised rows") {
    // Counts: doc 0 has column 0 twice and column 1 once; doc 1 has columns 1 and 2.
    std::vector<Ids> train = {{0, 0, 1}, {1, 2}, {}};
    Tfidf tfidf = Tfidf::fit(train, 3);
    // n = 3; df = [1, 2, 1]; idf = ln((1 + 3) / (1 + df)) + 1
    REQUIRE(tfidf.num_cols() == 3);
    CHECK(tfidf.idf[0] == doctest::Approx(1.0 + std::log(2.0)));
    CHECK(tfidf.idf[1] == doctest::Approx(1.0 + std::log(4.0 / 3.0)));
    CHECK(tfidf.idf[2] == doctest::Approx(1.693147181));

    CsrBatch batch = tfidf.transform(train);
    CHECK(batch.indptr == Ids{0, 2, 4, 4});
    CHECK(batch.indices == Ids{0, 1, 1, 2});
    // Row 0: [2 * 1.693147, 1 * 1.287682] / its norm 3.622862.
    CHECK(batch.values[0] == doctest::Approx(0.934701964).epsilon(1e-6));
    CHECK(batch.values[1] == doctest::Approx(0.355432468).epsilon(1e-6));
    CHECK(batch.values[2] == doctest::Approx(0.605348508).epsilon(1e-6));
    CHECK(batch.values[3] == doctest::Approx(0.795960542).epsilon(1e-6));

    // A single-column row normalises to exactly 1 whatever its count.
    CsrBatch single = tfidf.transform(std::vector<Ids>{{2, 2, 2}});
    CHECK(single.values == std::vector<float>{1.0f});
  }

  TEST_CASE("Tfidf: bad input throws") {
    CHECK_THROWS_WITH_AS(Tfidf::fit({}, 3), "Tfidf::fit: no documents to fit on", std::invalid_argument);
    CHECK_THROWS_AS(Tfidf::fit({{5}}, 3), std::invalid_argument);
    Tfidf tfidf = Tfidf::fit({{0, 1}}, 3);
    CHECK_THROWS_WITH_AS(tfidf.transform(to_csr({{0}}, 4)),
                         "Tfidf::transform: batch has 4 columns, the idf was fitted for 3",
                         std::invalid_argument);
  }

  TEST_CASE("to_dense: the CSR matrix with zeros filled in") {
    CsrBatch batch = to_csr({{3, 1, 3, 3}, {}, {0, 2, 2}}, 4);
    xt::xarray<float> dense = to_dense(batch);
    REQUIRE(dense.shape().size() == 2);
    CHECK(dense.shape()[0] == 3);
    CHECK(dense.shape()[1] == 4);
    std::vector<float> flat(dense.begin(), dense.end());
    CHECK(flat == std::vector<float>{0, 1, 0, 3, 0, 0, 0, 0, 1, 0, 2, 0});
    CHECK(to_dense(to_csr({}, 4)).size() == 0);
  }

  TEST_CASE("bag sums equal dense rows times an embedding table") {
    // What EmbeddingBag(mode="sum") computes from the bags must match the Linear path.
    CsrBatch batch = Tfidf::fit({{0, 0, 1}, {1, 2}}, 3).transform(std::vector<Ids>{{0, 0, 1}, {2}, {}});
    const float table[3][2] = {{1, 2}, {3, 4}, {5, 6}};
    xt::xarray<float> dense = to_dense(batch);
    for (std::int64_t b = 0; b < batch.rows(); ++b) {
      for (int d = 0; d < 2; ++d) {
        float bag_sum = 0, dense_sum = 0;
        for (std::int64_t k = batch.indptr[b]; k < batch.indptr[b + 1]; ++k)
          bag_sum += batch.values[k] * table[batch.indices[k]][d];
        for (std::size_t c = 0; c < 3; ++c) dense_sum += dense(b, c) * table[c][d];
        CHECK(bag_sum == doctest::Approx(dense_sum));
      }
    }
  }

  TEST_CASE("check_csr: every broken layout throws, so hand-made batches are safe") {
    CsrBatch good = to_csr({{1, 2}, {0}}, 3);
    CHECK_NOTHROW(check_csr(good, "test"));

    CsrBatch no_indptr = good;
    no_indptr.indptr.clear();
    CHECK_THROWS_WITH_AS(to_dense(no_indptr),
                         "to_dense: bad CSR batch: indptr is empty (it needs rows + 1 entries)",
                         std::invalid_argument);
    CsrBatch bad_start = good;
    bad_start.indptr[0] = 1;
    CHECK_THROWS_AS(to_dense(bad_start), std::invalid_argument);
    CsrBatch decreasing = good;
    decreasing.indptr = {0, 3, 2};
    CHECK_THROWS_AS(to_dense(decreasing), std::invalid_argument);
    CsrBatch short_end = good;
    short_end.indptr.back() = 2;
    CHECK_THROWS_WITH_AS(to_dense(short_end),
                         "to_dense: bad CSR batch: indptr ends at 2 but there are 3 indices",
                         std::invalid_argument);
    CsrBatch past_end = good;
    past_end.indptr.back() = 99;
    CHECK_THROWS_AS(to_dense(past_end), std::invalid_argument);
    CsrBatch few_values = good;
    few_values.values.pop_back();
    CHECK_THROWS_AS(to_dense(few_values), std::invalid_argument);
    CsrBatch out_of_range = good;
    out_of_range.indices[0] = 3;
    CHECK_THROWS_WITH_AS(to_dense(out_of_range), "to_dense: bad CSR batch: row 0: column 3 outside [0, 3)",
                         std::invalid_argument);
    CsrBatch unsorted = good;
    unsorted.indices = {2, 1, 0};
    CHECK_THROWS_AS(to_dense(unsorted), std::invalid_argument);
    CsrBatch repeated = good;
    repeated.indices = {1, 1, 0};
    CHECK_THROWS_AS(Tfidf::fit({{0}}, 3).transform(repeated), std::invalid_argument);
    CsrBatch negative_cols = good;
    negative_cols.num_cols = -1;
    CHECK_THROWS_AS(to_dense(negative_cols), std::invalid_argument);
  }

  // ---------------------------------------------------------------- TSV files

  TEST_CASE("read_tsv: the tiny spam file") {
    const std::string path = source_dir + "/tests/data/tiny_spam.tsv";
    TsvData data = read_tsv(path);
    CHECK(data.size() == 40);
    CHECK(data.label_names == Strings{"ham", "spam"});
    CHECK(data.skipped_lines == 0);
    CHECK(std::count(data.targets.begin(), data.targets.end(), 1) == 20);
    CHECK(data.texts[0] == "Can we move the team meeting to Thursday afternoon?");
    CHECK(data.targets[0] == 0);
    CHECK(data.targets[1] == 1);
    CHECK(data.line_numbers[39] == 40);

    // Given label names fix the ids, whatever the sorted order would be.
    TsvOptions options;
    options.label_names = {"spam", "ham"};
    TsvData flipped = read_tsv(path, options);
    CHECK(flipped.targets[0] == 1);
    CHECK(flipped.targets[1] == 0);
    CHECK(flipped.label_names == Strings{"spam", "ham"});
  }

  TEST_CASE(
      "read_tsv: text keeps further TABs; CRLF, a BOM, blank lines and a missing last newline are fine") {
    TempFile file("\xEF\xBB\xBFspam\tbuy\tnow\r\n\r\nham\thello there\r\nham\t\nspam\tlast line");
    TsvData data = read_tsv(file.path());
    CHECK(data.texts == Strings{"buy\tnow", "hello there", "", "last line"});
    CHECK(data.targets == Ids{1, 0, 0, 1});
    CHECK(data.line_numbers == Ids{1, 3, 4, 5});
    CHECK(data.label_names == Strings{"ham", "spam"});
  }

  TEST_CASE("read_tsv: a malformed line throws with the file and line number") {
    TempFile no_tab("ham\tfine\nspam\tfine too\nthis line has no tab\n", "bad.tsv");
    CHECK_THROWS_WITH_AS(read_tsv(no_tab.path()),
                         ("tsv: " + no_tab.path() + ":3: no TAB separating label and text").c_str(),
                         FileError);
    CHECK(error_line([&] { read_tsv(no_tab.path()); }) == 3);

    TempFile empty_label("ham\tfine\n\tno label\n");
    CHECK_THROWS_WITH_AS(read_tsv(empty_label.path()),
                         ("tsv: " + empty_label.path() + ":2: empty label before the TAB").c_str(),
                         FileError);

    TsvOptions options;
    options.label_names = {"ham", "spam"};
    TempFile unknown_label("ham\tfine\neggs\tunknown\n");
    CHECK_THROWS_WITH_AS(
        read_tsv(unknown_label.path(), options),
        ("tsv: " + unknown_label.path() + ":2: label 'eggs' is not one of the 2 given label names").c_str(),
        FileError);
  }

  TEST_CASE("read_tsv: the skip policy leaves bad lines out and counts them") {
    TempFile file("ham\tone\nno tab here\n\tno label\nspam\ttwo\neggs\tthree\n");
    TsvOptions options;
    options.bad_lines = BadLinePolicy::skip;
    options.label_names = {"ham", "spam"};
    TsvData data = read_tsv(file.path(), options);
    CHECK(data.texts == Strings{"one", "two"});
    CHECK(data.targets == Ids{0, 1});
    CHECK(data.line_numbers == Ids{1, 4});
    CHECK(data.skipped_lines == 3);
  }

  TEST_CASE("read_tsv: empty files, files with nothing usable, missing files") {
    TempFile empty("", "empty.tsv");
    CHECK_THROWS_WITH_AS(read_tsv(empty.path()), ("tsv: " + empty.path() + ": empty file").c_str(),
                         FileError);
    CHECK(error_line([&] { read_tsv(empty.path()); }) == 0);

    TempFile blank("\n\r\n\n");
    CHECK_THROWS_WITH_AS(read_tsv(blank.path()),
                         ("tsv: " + blank.path() + ": no usable lines (3 lines, 0 skipped)").c_str(),
                         FileError);

    TempFile all_bad("no tab\nnor here\n");
    TsvOptions skip;
    skip.bad_lines = BadLinePolicy::skip;
    CHECK_THROWS_WITH_AS(read_tsv(all_bad.path(), skip),
                         ("tsv: " + all_bad.path() + ": no usable lines (2 lines, 2 skipped)").c_str(),
                         FileError);

    const std::string missing = source_dir + "/tests/data/data_no_such_file.tsv";
    CHECK_THROWS_WITH_AS(read_tsv(missing), ("tsv: " + missing + ": cannot open file for reading").c_str(),
                         FileError);
    CHECK_THROWS_WITH_AS(read_tsv(source_dir + "/tests/data"),
                         ("tsv: " + source_dir + "/tests/data: is a directory, not a file").c_str(),
                         FileError);
  }

  TEST_CASE("read_tsv: invalid UTF-8 is accepted, rejected or skipped by option") {
    TempFile file("ham\tcaf\xC3\xA9 ok\nspam\tbad \xFF\xFE bytes\nham\tcut \xE2\x82\n");
    TsvData accepted = read_tsv(file.path());
    CHECK(accepted.size() == 3);
    CHECK(tokenize(accepted.texts[1]) == Strings{"bad", "bytes"});

    TsvOptions reject;
    reject.invalid_utf8 = Utf8Policy::error;
    CHECK_THROWS_WITH_AS(read_tsv(file.path(), reject),
                         ("tsv: " + file.path() + ":2: invalid UTF-8 at byte 10 of the line").c_str(),
                         FileError);

    TsvOptions skip;
    skip.invalid_utf8 = Utf8Policy::skip;
    TsvData kept = read_tsv(file.path(), skip);
    CHECK(kept.texts == Strings{"caf\xC3\xA9 ok"});
    CHECK(kept.skipped_lines == 2);
    CHECK(kept.label_names == Strings{"ham"});
  }

  TEST_CASE("read_tsv: bad label_names throw std::invalid_argument") {
    TempFile file("ham\tx\n");
    TsvOptions options;
    options.label_names = {"ham", "ham"};
    CHECK_THROWS_WITH_AS(read_tsv(file.path(), options),
                         "read_tsv: label_names must be non-empty and distinct, label 1 is 'ham'",
                         std::invalid_argument);
    options.label_names = {""};
    CHECK_THROWS_AS(read_tsv(file.path(), options), std::invalid_argument);
  }

  // ---------------------------------------------------------------- shuffles and splits

  TEST_CASE("std::mt19937_64 is the generator the standard specifies") {
    // [rand.predef]: the 10000th output of a default-constructed mt19937_64.
    std::mt19937_64 rng;
    rng.discard(9999);
    CHECK(rng() == 9981545732273789042ull);
  }

  TEST_CASE("uniform_below: exact draws for a fixed seed") {
    // These numbers come from an independent MT19937-64 with the same rejection step;
    // if they change, shuffles on this platform no longer match other platforms.
    std::mt19937_64 rng(42);
    std::vector<std::uint64_t> draws;
    for (int i = 0; i < 8; ++i) draws.push_back(uniform_below(rng, 10));
    CHECK(draws == std::vector<std::uint64_t>{6, 4, 0, 2, 1, 8, 6, 4});
    CHECK(uniform_below(rng, 1) == 0);
    CHECK_THROWS_AS(uniform_below(rng, 0), std::invalid_argument);
    // The largest bound rejects nearly half the raw values and must still terminate.
    CHECK(uniform_below(rng, (1ull << 63) + 1) <= (1ull << 63));
  }

  TEST_CASE("shuffled_indices: exact, repeatable permutations") {
    CHECK(shuffled_indices(10, 42) == Ids{1, 7, 9, 0, 3, 8, 4, 2, 5, 6});
    CHECK(shuffled_indices(10, 0) == Ids{7, 2, 0, 8, 3, 9, 6, 1, 5, 4});
    CHECK(shuffled_indices(1000, 5) == shuffled_indices(1000, 5));
    CHECK(shuffled_indices(1000, 5) != shuffled_indices(1000, 6));
    Ids big = shuffled_indices(1000, 5);
    std::sort(big.begin(), big.end());
    Ids identity(1000);
    for (std::int64_t i = 0; i < 1000; ++i) identity[i] = i;
    CHECK(big == identity);
    CHECK(shuffled_indices(0, 1).empty());
    CHECK(shuffled_indices(1, 1) == Ids{0});
    CHECK_THROWS_WITH_AS(shuffled_indices(-3, 1), "shuffled_indices: n must be >= 0, got -3",
                         std::invalid_argument);
  }

  TEST_CASE("train_test_split: exact split, sizes and bad fractions") {
    Split split = train_test_split(10, 0.3, 7);
    CHECK(split.test == Ids{0, 7, 4});
    CHECK(split.train == Ids{9, 3, 1, 2, 8, 6, 5});

    // ceil, as scikit-learn does, but 0.7 * 10 = 7.000000000000001 must not give 8.
    CHECK(train_test_split(10, 0.7, 1).test.size() == 7);
    Split corpus = train_test_split(6046, 0.2, 1);
    CHECK(corpus.test.size() == 1210);
    CHECK(corpus.train.size() == 4836);
    Ids all = corpus.train;
    all.insert(all.end(), corpus.test.begin(), corpus.test.end());
    std::sort(all.begin(), all.end());
    CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
    CHECK(all.front() == 0);
    CHECK(all.back() == 6045);

    CHECK_THROWS_AS(train_test_split(10, 0.0, 1), std::invalid_argument);
    CHECK_THROWS_AS(train_test_split(10, 1.0, 1), std::invalid_argument);
    CHECK_THROWS_AS(train_test_split(10, -0.5, 1), std::invalid_argument);
    CHECK_THROWS_AS(train_test_split(10, std::numeric_limits<double>::quiet_NaN(), 1), std::invalid_argument);
    CHECK_THROWS_AS(train_test_split(0, 0.5, 1), std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        train_test_split(1, 0.5, 1),
        "train_test_split: n=1 with test_fraction=0.500000 gives 1 test and 0 train examples; "
        "both must be at least 1",
        std::invalid_argument);
  }

  TEST_CASE("stratified_split: class shares kept, exact split for a fixed seed") {
    Ids targets = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
    Split split = stratified_split(targets, 0.5, 3);
    CHECK(split.test == Ids{4, 1, 0, 9, 7});
    CHECK(split.train == Ids{6, 8, 2, 5, 3});

    auto count = [](const Ids& indices, const Ids& labels, std::int64_t k) {
      return std::count_if(indices.begin(), indices.end(), [&](std::int64_t i) { return labels[i] == k; });
    };
    Ids corpus(150, 0);
    std::fill(corpus.begin() + 100, corpus.end(), 1);
    Split s = stratified_split(corpus, 0.2, 11);
    CHECK(s.test.size() == 30);
    CHECK(count(s.test, corpus, 0) == 20);
    CHECK(count(s.test, corpus, 1) == 10);

    // 11 examples, 6 to test: exact shares 3.82, 1.64, 0.55 -> 3, 1, 0 plus the two
    // largest leftovers (classes 0 and 1) -> 4, 2, 0.
    Ids uneven = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2};
    Split u = stratified_split(uneven, 0.5, 1);
    CHECK(u.test.size() == 6);
    CHECK(count(u.test, uneven, 0) == 4);
    CHECK(count(u.test, uneven, 1) == 2);
    CHECK(count(u.test, uneven, 2) == 0);

    CHECK_THROWS_WITH_AS(stratified_split({0, -1, 1}, 0.5, 1),
                         "stratified_split: targets[1] is -1, class ids must be >= 0", std::invalid_argument);
    CHECK_THROWS_AS(stratified_split({}, 0.5, 1), std::invalid_argument);
  }

  TEST_CASE("take: picks items by index and checks the indices") {
    Strings items = {"a", "b", "c"};
    CHECK(take(items, {2, 0, 2}) == Strings{"c", "a", "c"});
    CHECK(take(items, {}).empty());
    CHECK_THROWS_WITH_AS(take(items, {0, 3}), "take: indices[1] = 3 outside [0, 3)", std::invalid_argument);
    CHECK_THROWS_AS(take(items, {-1}), std::invalid_argument);

    // A minibatch: positions [begin, end) of a shuffled order.
    const std::vector<std::int64_t> order = {2, 0, 1, 5};
    CHECK(take(items, order, 1, 3) == Strings{"a", "b"});
    CHECK(take(items, order, 2, 2).empty());
    CHECK_THROWS_WITH_AS(take(items, order, 2, 5), "take: range [2, 5) outside the 4 indices",
                         std::invalid_argument);
    CHECK_THROWS_AS(take(items, order, 3, 2), std::invalid_argument);
    CHECK_THROWS_WITH_AS(take(items, order, 2, 4), "take: indices[3] = 5 outside [0, 3)",
                         std::invalid_argument);
  }

  // ---------------------------------------------------------------- end to end

  TEST_CASE("tiny spam end to end: tokens -> vocabulary -> tf-idf -> nearest centroid") {
    TsvData data = read_tsv(source_dir + "/tests/data/tiny_spam.tsv");
    std::vector<Strings> tokens = tokenize_all(data.texts);
    Split split = stratified_split(data.targets, 0.25, 2024);
    REQUIRE(split.test.size() == 10);

    // Vocabulary and idf come from the training part only, as they would in practice.
    Vocabulary vocab = Vocabulary::build(take(tokens, split.train));
    std::vector<Ids> train_ids = vocab.encode_all(take(tokens, split.train));
    std::vector<Ids> test_ids = vocab.encode_all(take(tokens, split.test));
    Tfidf tfidf = Tfidf::fit(train_ids, vocab.size());
    xt::xarray<float> train = to_dense(tfidf.transform(train_ids));
    xt::xarray<float> test = to_dense(tfidf.transform(test_ids));
    CHECK(vocab.contains("free"));
    CHECK(vocab.contains("meeting"));

    // Sum the tf-idf rows of each class (15 training texts each, so sums compare as
    // means would); a test text goes to the class whose sum it has the larger dot product with.
    auto cols = static_cast<std::size_t>(vocab.size());
    std::vector<std::vector<double>> centroid(2, std::vector<double>(cols, 0.0));
    for (std::size_t r = 0; r < split.train.size(); ++r) {
      for (std::size_t c = 0; c < cols; ++c) centroid[data.targets[split.train[r]]][c] += train(r, c);
    }
    int correct = 0;
    for (std::size_t r = 0; r < split.test.size(); ++r) {
      double score[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        for (std::size_t c = 0; c < cols; ++c) score[k] += centroid[k][c] * test(r, c);
      }
      int predicted = score[1] > score[0] ? 1 : 0;
      if (predicted == data.targets[split.test[r]]) ++correct;
    }
    CHECK(correct >= 9);
  }

  TEST_CASE("the bundled SpamAssassin sample: clean UTF-8, both classes, learnable") {
    TsvOptions strict;
    strict.invalid_utf8 = Utf8Policy::error;
    strict.label_names = {"ham", "spam"};
    TsvData data = read_tsv(source_dir + "/examples/data/spam_sample.tsv", strict);
    CHECK(data.size() == 1500);
    CHECK(std::count(data.targets.begin(), data.targets.end(), 1) == 470);

    // Nearest class centroid on sparse tf-idf rows: a sanity check that the texts
    // carry the signal, far below what a trained model reaches.
    std::vector<Strings> tokens = tokenize_all(data.texts);
    Split split = stratified_split(data.targets, 0.2, 7);
    VocabularyOptions options;
    options.min_df = 2;
    Vocabulary vocab = Vocabulary::build(take(tokens, split.train), options);
    std::vector<Ids> train_ids = vocab.encode_all(take(tokens, split.train));
    Tfidf tfidf = Tfidf::fit(train_ids, vocab.size());
    CsrBatch train = tfidf.transform(train_ids);
    CsrBatch test = tfidf.transform(vocab.encode_all(take(tokens, split.test)));

    std::vector<std::vector<double>> centroid(
        2, std::vector<double>(static_cast<std::size_t>(vocab.size()), 0.0));
    double class_size[2] = {0, 0};
    for (std::int64_t r = 0; r < train.rows(); ++r) {
      std::int64_t k = data.targets[split.train[r]];
      class_size[k] += 1;
      for (std::int64_t j = train.indptr[r]; j < train.indptr[r + 1]; ++j) {
        centroid[k][train.indices[j]] += train.values[j];
      }
    }
    int correct = 0;
    for (std::int64_t r = 0; r < test.rows(); ++r) {
      double score[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        for (std::int64_t j = test.indptr[r]; j < test.indptr[r + 1]; ++j) {
          score[k] += centroid[k][test.indices[j]] * test.values[j] / class_size[k];
        }
      }
      int predicted = score[1] > score[0] ? 1 : 0;
      if (predicted == data.targets[split.test[r]]) ++correct;
    }
    double accuracy = static_cast<double>(correct) / static_cast<double>(test.rows());
    MESSAGE("nearest-centroid accuracy on the sample: " << accuracy);
    CHECK(accuracy > 0.85);
  }

}  // TEST_SUITE
