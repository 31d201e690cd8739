// export_split: writes the train/test split bow_classifier makes for itself
// (stratified, --test-fraction, --seed: the same calls, so the same documents)
// as files that bow_classifier and fastText both read:
//
//   export_split --tsv FILE [--test-fraction X] [--seed N] DIR
//       DIR/train.tsv, DIR/test.tsv   label<TAB>tokens        bow_classifier --data .. --test ..
//       DIR/train.ft,  DIR/test.ft    __label__LABEL tokens    fasttext supervised / test
//
// Each text is replaced by its tokens (data/tokenizer.hpp: lower-cased ASCII
// letter and digit runs) joined by single spaces, in order and with repeats, so
// the two tools see the same tokens: fastText splits on whitespace, and
// bow_classifier's tokenizer gives the joined text back token for token
// (checked here for every document). Training documents are written in
// bow_classifier's training order, test documents in its test order.
//
// Prints one line of JSON: documents, tokens and labels of each part.
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/data/split.hpp>
#include <tapegrad/data/tokenizer.hpp>
#include <tapegrad/data/tsv.hpp>

#include "options.hpp"

namespace {

struct Options {
  std::string tsv, dir;
  double test_fraction = 0.2;  // bow_classifier's defaults
  uint64_t seed = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  const std::vector<std::string> rest = bench::read_options(
      argc, argv, {{"--tsv", &o.tsv}, {"--test-fraction", &o.test_fraction}, {"--seed", &o.seed}});
  if (rest.size() == 1) o.dir = rest[0];
  if (o.tsv.empty() || o.dir.empty())
    throw std::invalid_argument("usage: export_split --tsv FILE [--test-fraction X] [--seed N] DIR");
  return o;
}

std::string joined(const std::vector<std::string>& tokens) {
  std::string s;
  for (const std::string& t : tokens) s += (s.empty() ? "" : " ") + t;
  return s;
}

// Writes one part in both formats; returns its number of tokens.
std::size_t write_part(const Options& o, const std::string& name, const tg::data::TsvData& data,
                       const std::vector<int64_t>& ids) {
  std::ofstream tsv(o.dir + "/" + name + ".tsv"), ft(o.dir + "/" + name + ".ft");
  std::size_t count = 0;
  for (int64_t i : ids) {
    const std::vector<std::string> tokens = tg::data::tokenize(data.texts[static_cast<std::size_t>(i)]);
    const std::string text = joined(tokens);
    if (tg::data::tokenize(text) != tokens)
      throw std::runtime_error(o.tsv + ":" + std::to_string(data.line_numbers[static_cast<std::size_t>(i)]) +
                               ": the joined tokens do not tokenize back to themselves");
    const std::string& label = data.label_names[static_cast<std::size_t>(data.targets[static_cast<std::size_t>(i)])];
    tsv << label << '\t' << text << '\n';
    ft << "__label__" << label << ' ' << text << '\n';
    count += tokens.size();
  }
  if (!tsv || !ft) throw std::runtime_error("error writing " + o.dir + "/" + name + ".{tsv,ft}");
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const tg::data::TsvData data = tg::data::read_tsv(o.tsv);
    const tg::data::Split split = tg::data::stratified_split(data.targets, o.test_fraction, o.seed);
    const std::size_t train_tokens = write_part(o, "train", data, split.train);
    const std::size_t test_tokens = write_part(o, "test", data, split.test);
    std::printf("{\"train_docs\": %zu, \"test_docs\": %zu, \"train_tokens\": %zu, \"test_tokens\": %zu}\n",
                split.train.size(), split.test.size(), train_tokens, test_tokens);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_split: %s\n", e.what());
    return 2;
  }
}
