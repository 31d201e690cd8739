// export_ids: writes the ids file the step runners read (layout in ids_file.hpp).
//
//   export_ids --tsv FILE [--min-df N] [--max-vocab N] [--seed N] OUT
//       label<TAB>text lines -> the bow_classifier's tokenizer and vocabulary
//       (unknown words dropped), one multi-hot document per line, shuffled.
//   export_ids --synthetic --vocab V [--docs N] [--tokens L] [--seed N] OUT
//       N documents of exactly L distinct ids each, drawn from a Zipf(1)
//       distribution over V ids (id 0 the most frequent, as the vocabulary
//       numbers words), labels 1 with probability 0.31 (SpamAssassin's share of
//       spam). Every corpus has the same tokens per batch whatever V is.
//
// Prints one line of statistics (documents, ids per document, distinct rows per
// batch of 32) as JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <tapegrad/data/batch.hpp>
#include <tapegrad/data/split.hpp>
#include <tapegrad/data/tokenizer.hpp>
#include <tapegrad/data/tsv.hpp>
#include <tapegrad/data/vocabulary.hpp>

#include "ids_file.hpp"
#include "options.hpp"

namespace {

using Docs = std::vector<std::vector<int64_t>>;

struct Options {
  std::string tsv, out;
  bool synthetic = false;
  int64_t vocab = 0, docs = 4096, tokens = 160, min_df = 1, max_vocab = 0;
  uint64_t seed = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  const std::vector<std::string> rest = bench::read_options(
      argc, argv,
      {{"--tsv", &o.tsv}, {"--synthetic", &o.synthetic}, {"--vocab", &o.vocab}, {"--docs", &o.docs},
       {"--tokens", &o.tokens}, {"--min-df", &o.min_df}, {"--max-vocab", &o.max_vocab}, {"--seed", &o.seed}});
  if (rest.size() == 1) o.out = rest[0];
  if (o.out.empty() || o.synthetic == !o.tsv.empty())
    throw std::invalid_argument("usage: export_ids (--tsv FILE | --synthetic --vocab V) [options] OUT");
  if (o.synthetic && (o.vocab <= 0 || o.tokens <= 0 || o.tokens > o.vocab || o.docs <= 0))
    throw std::invalid_argument("--synthetic needs 0 < --tokens <= --vocab and --docs > 0");
  return o;
}

// Sorted unique ids per document: what a binary CSR row holds.
void add_documents(bench::Corpus& c, const Docs& docs, const std::vector<int64_t>& order) {
  Docs picked;
  for (int64_t i : order) picked.push_back(docs[static_cast<std::size_t>(i)]);
  const tg::CsrBatch csr = tg::data::to_csr(picked, c.vocab, tg::data::CsrValues::binary);
  c.ids.assign(csr.indices.begin(), csr.indices.end());
  c.offsets = csr.indptr;
}

bench::Corpus from_tsv(const Options& o) {
  const tg::data::TsvData data = tg::data::read_tsv(o.tsv);
  const auto tokens = tg::data::tokenize_all(data.texts);
  tg::data::VocabularyOptions vo;
  vo.min_df = o.min_df;
  vo.max_size = o.max_vocab;
  vo.unknown = tg::data::UnknownPolicy::drop;
  const tg::data::Vocabulary vocab = tg::data::Vocabulary::build(tokens, vo);
  bench::Corpus c;
  c.vocab = vocab.size();
  c.classes = static_cast<int64_t>(data.label_names.size());
  const std::vector<int64_t> order = tg::data::shuffled_indices(data.size(), o.seed);
  add_documents(c, vocab.encode_all(tokens), order);
  for (int64_t i : order) c.labels.push_back(static_cast<int32_t>(data.targets[static_cast<std::size_t>(i)]));
  return c;
}

bench::Corpus synthetic(const Options& o) {
  std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(o.vocab));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Zipf(1): P(id) proportional to 1 / (id + 1); draw by inverting the CDF.
  std::vector<double> cdf(static_cast<std::size_t>(o.vocab));
  double total = 0;
  for (int64_t v = 0; v < o.vocab; ++v)
    cdf[static_cast<std::size_t>(v)] = total += 1.0 / static_cast<double>(v + 1);
  bench::Corpus c;
  c.vocab = o.vocab;
  c.classes = 2;
  std::set<int64_t> doc;
  for (int64_t d = 0; d < o.docs; ++d) {
    doc.clear();
    while (static_cast<int64_t>(doc.size()) < o.tokens) {
      const double u = unit(rng) * total;
      doc.insert(std::min<int64_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin(), o.vocab - 1));
    }
    c.ids.insert(c.ids.end(), doc.begin(), doc.end());
    c.offsets.push_back(static_cast<int64_t>(c.ids.size()));
    c.labels.push_back(unit(rng) < 0.31 ? 1 : 0);
  }
  return c;
}

void print_stats(const bench::Corpus& c) {
  const int64_t batch = 32;
  double rows = 0;
  std::vector<int32_t> seen;
  for (int64_t b = 0; b < c.batches(batch); ++b) {
    seen.assign(c.ids.begin() + c.offsets[b * batch], c.ids.begin() + c.offsets[(b + 1) * batch]);
    std::sort(seen.begin(), seen.end());
    rows += static_cast<double>(std::unique(seen.begin(), seen.end()) - seen.begin());
  }
  std::printf(
      "{\"vocab\": %lld, \"docs\": %lld, \"ids\": %zu, \"ids_per_doc\": %.1f, "
      "\"rows_per_batch\": %.1f}\n",
      static_cast<long long>(c.vocab), static_cast<long long>(c.docs()), c.ids.size(),
      static_cast<double>(c.ids.size()) / static_cast<double>(std::max<int64_t>(c.docs(), 1)),
      rows / static_cast<double>(std::max<int64_t>(c.batches(batch), 1)));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const bench::Corpus c = o.synthetic ? synthetic(o) : from_tsv(o);
    bench::write_corpus(o.out, c);
    print_stats(c);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_ids: %s\n", e.what());
    return 2;
  }
}
