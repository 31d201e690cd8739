// Any byte string as a labelled TSV corpus (and as a saved vocabulary), then
// the whole path a corpus takes into a model: tokens, vocabulary, CSR rows,
// tf-idf, bags.
//
// The first byte picks the reader's options; the rest is the file.
// Promises checked (data/tsv.hpp, data/vocabulary.hpp, data/batch.hpp):
//   - read_tsv returns or throws FileError naming the file ("tsv: <path>[:<line>]: ")
//     with a line number within the file; nothing else escapes;
//   - what it returns is consistent: one target and line number per text, line
//     numbers increasing, targets in range, no line break inside a text, valid
//     UTF-8 when the policy is not `accept`, label names sorted and distinct;
//   - nothing downstream of a successful read throws;
//   - Vocabulary::load returns or throws FileError naming the file.
#include <algorithm>

#include "data/batch.hpp"
#include "data/tokenizer.hpp"
#include "data/tsv.hpp"
#include "data/vocabulary.hpp"
#include "fuzz_common.hpp"

namespace {

const std::string& input_path() {
  static const std::string p = fuzz::scratch_path("input.tsv");
  return p;
}

void check_file_error(const tg::data::FileError& e, const std::string& reader, std::size_t size) {
  const std::string what = e.what();
  FUZZ_EXPECT(what.rfind(reader + ": " + input_path(), 0) == 0, what);
  FUZZ_EXPECT(e.path() == input_path(), what);
  // There are at most size + 1 lines in a file of `size` bytes.
  FUZZ_EXPECT(e.line() >= 0 && static_cast<std::size_t>(e.line()) <= size + 1, what);
}

void check_corpus(const tg::data::TsvData& d, const tg::data::TsvOptions& o) {
  const std::size_t n = d.texts.size();
  FUZZ_EXPECT(n > 0, "an empty corpus was returned instead of refused");
  FUZZ_EXPECT(d.targets.size() == n && d.line_numbers.size() == n, "parallel vectors differ in length");
  FUZZ_EXPECT(std::is_sorted(d.label_names.begin(), d.label_names.end()) || !o.label_names.empty(),
              "label names are not sorted");
  FUZZ_EXPECT(std::adjacent_find(d.label_names.begin(), d.label_names.end()) == d.label_names.end() ||
                  !o.label_names.empty(),
              "a label name repeats");
  for (std::size_t i = 0; i < n; ++i) {
    FUZZ_EXPECT(d.targets[i] >= 0 && d.targets[i] < static_cast<int64_t>(d.label_names.size()),
                "target out of range");
    FUZZ_EXPECT(i == 0 || d.line_numbers[i] > d.line_numbers[i - 1], "line numbers do not increase");
    FUZZ_EXPECT(d.texts[i].find('\n') == std::string::npos, "a text holds a line break");
    if (o.invalid_utf8 != tg::data::Utf8Policy::accept)
      FUZZ_EXPECT(tg::data::valid_utf8(d.texts[i]), "invalid UTF-8 got through");
  }
}

// Tokens -> vocabulary -> ids -> CSR (counts, binary, tf-idf) -> bags: the
// example's pipeline. Any exception here is a bug: the input is now valid.
void downstream(const tg::data::TsvData& d) {
  auto tokens = tg::data::tokenize_all(d.texts);
  auto vocab = tg::data::Vocabulary::build(
      tokens, {.min_df = 1, .max_size = 64, .unknown = tg::data::UnknownPolicy::map_to_unk});
  auto docs = vocab.encode_all(tokens);
  for (std::size_t i = 0; i < docs.size(); ++i)
    FUZZ_EXPECT(docs[i].size() == tokens[i].size(), "map_to_unk dropped a token");
  const auto counts = tg::data::to_csr(docs, vocab.size(), tg::data::CsrValues::counts);
  tg::check_csr(counts, "fuzz");
  tg::check_csr(tg::data::to_csr(docs, vocab.size(), tg::data::CsrValues::binary), "fuzz");
  const auto tfidf = tg::data::Tfidf::fit(docs, vocab.size());
  tg::check_csr(tfidf.transform(counts), "fuzz");
  FUZZ_EXPECT(counts.rows() == static_cast<int64_t>(docs.size()), "one row per document");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  fuzz::write_file(input_path(), data + 1, size - 1);

  tg::data::TsvOptions o;
  o.bad_lines = (mode & 1) ? tg::data::BadLinePolicy::skip : tg::data::BadLinePolicy::error;
  o.invalid_utf8 = static_cast<tg::data::Utf8Policy>((mode >> 1) % 3);
  if (mode & 8) o.label_names = {"ham", "spam"};

  try {
    const tg::data::TsvData d = tg::data::read_tsv(input_path(), o);
    check_corpus(d, o);
    try {
      downstream(d);
    } catch (const std::exception& e) {
      fuzz::broken(std::string("the pipeline after a successful read threw: ") + e.what());
    }
  } catch (const tg::data::FileError& e) {
    check_file_error(e, "tsv", size - 1);
  } catch (const std::exception& e) {
    fuzz::broken(std::string("read_tsv threw something other than FileError: ") + e.what());
  }

  try {
    const tg::data::Vocabulary v = tg::data::Vocabulary::load(input_path());
    for (int64_t id = 0; id < v.size(); ++id) FUZZ_EXPECT(v.find(v.token(id)) == id, "ids do not round-trip");
  } catch (const tg::data::FileError& e) {
    check_file_error(e, "vocabulary", size - 1);
  } catch (const std::exception& e) {
    fuzz::broken(std::string("Vocabulary::load threw something other than FileError: ") + e.what());
  }
  return 0;
}
