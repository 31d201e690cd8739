// bow_classifier: a bag-of-words spam classifier that trains either way —
// EmbeddingBag over token ids, or Linear over multi-hot count rows — and, with
// --mode both, trains the two side by side from the same initial weights on the
// same batches to show they learn the same thing while one is far cheaper.
//
//   bow_classifier [--data FILE] [--mode both] [--optim adam] ...   train (see --help)
//   bow_classifier predict --load MODEL [TEXT ...]                   classify text or stdin lines
//   mpirun -np 2 bow_classifier --distributed [...]                  train on 2 processes
//   (docs/distributed.md)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>

#include <tapegrad/distributed/distributed.hpp>
#include <tapegrad/distributed/sampler.hpp>
#include <tapegrad/distributed/shard.hpp>
#include <tapegrad/tapegrad.hpp>

#include "../flags.hpp"
#include "model.hpp"
#include "report.hpp"

namespace {

using namespace bow;
using tg::Tensor;
namespace dist = tg::distributed;

const char* usage = R"(usage:
  bow_classifier [options]                       train and evaluate
  bow_classifier predict --load MODEL [TEXT...]  classify TEXT, or each line of stdin

options:
  --data FILE        label<TAB>text file (default: the bundled SpamAssassin sample)
  --mode M           embedding | linear | both (default both)
  --optim O          sgd | adam (default adam)
  --dim N            hidden size D (default 64)
  --batch N          documents per step (default 32)
  --epochs N         passes over the training set (default 3)
  --lr X             learning rate (default 0.1 for sgd, 0.01 for adam)
  --seed N           initial weights, split and batch order (default 0)
  --threads N        threads for the training loops and OpenBLAS (default: TAPEGRAD_NUM_THREADS,
                     else every core); the embedding path's results do not depend on it
  --min-df N         keep tokens found in at least N training documents (default 2)
  --max-vocab N      keep at most N tokens, most frequent first (default 0: no limit)
  --values V         binary | counts | tfidf: the value of each word in a row (default binary:
                     multi-hot rows; raw counts let long emails swamp SGD)
  --test-fraction X  share of documents held out for testing (default 0.2)
  --test FILE        test on FILE's documents (label<TAB>text) and train on all of --data
  --save FILE        save a checkpoint to FILE (safetensors: the model, the optimizer's
                     state, the epoch, the settings) and the vocabulary to FILE.vocab
  --load FILE        resume training from a checkpoint: --epochs N more epochs, with its
                     optimizer state, lr, seed and split (with --mode both, both runs go
                     on from the saved one); or the model to use (predict)
  --metrics FILE     write per-step and per-epoch metrics as CSV
  --plot FILE        draw both modes' loss and step time: FILE.png (by gnuplot; without it,
                     an SVG beside it) or FILE.svg
  --predictions FILE write the test set's predicted labels (label<TAB>text)
  --distributed      train on every process mpirun started (a build with -Dmpi=enabled):
                     each takes --batch / N documents of every batch, the gradients are
                     averaged, rank 0 prints and saves (docs/distributed.md)
  --shard-table      with --distributed, --mode embedding: split the table's rows across the
                     processes instead of the batch: each looks up and updates its own rows
                     for the whole batch, and the bags' partial sums are added up
  --help             this text
)";

struct Options {
  std::string command = "train";
  std::string data = BOW_DEFAULT_DATA;
  std::string mode = "both", optim = "adam", values = "binary";
  std::size_t dim = 64, batch = 32, epochs = 3, max_vocab = 0, threads = 0;
  int64_t min_df = 2;
  double lr = -1, test_fraction = 0.2;
  uint64_t seed = 0;
  std::string save, load, metrics, plot, predictions, test;
  bool distributed = false, shard_table = false;
  std::vector<std::string> texts;  // predict: the documents to classify
};

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  if (argc > 1 && std::string(argv[1]) == "predict") {
    o.command = "predict";
    i = 2;
  }
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    return argv[++i];
  };
  auto number = [&](const std::string& flag) -> double {
    std::string v = value(flag);
    try {
      std::size_t used = 0;
      double x = std::stod(v, &used);
      if (used == v.size()) return x;
    } catch (const std::exception&) {
    }
    throw std::invalid_argument(flag + ": not a number: '" + v + "'");
  };
  auto count = [&](const std::string& flag) -> std::size_t {
    double x = number(flag);
    if (x < 0 || x != static_cast<double>(static_cast<std::size_t>(x)))
      throw std::invalid_argument(flag + ": expected a whole number >= 0, got " + std::to_string(x));
    return static_cast<std::size_t>(x);
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (a == "--data")
      o.data = value(a);
    else if (a == "--mode")
      o.mode = value(a);
    else if (a == "--optim")
      o.optim = value(a);
    else if (a == "--values")
      o.values = value(a);
    else if (a == "--dim")
      o.dim = count(a);
    else if (a == "--batch")
      o.batch = count(a);
    else if (a == "--epochs")
      o.epochs = count(a);
    else if (a == "--max-vocab")
      o.max_vocab = count(a);
    else if (a == "--min-df")
      o.min_df = static_cast<int64_t>(count(a));
    else if (a == "--lr")
      o.lr = number(a);
    else if (a == "--test-fraction")
      o.test_fraction = number(a);
    else if (a == "--seed")
      o.seed = count(a);
    else if (a == "--threads")
      o.threads = count(a);
    else if (a == "--test")
      o.test = value(a);
    else if (a == "--save")
      o.save = value(a);
    else if (a == "--load")
      o.load = value(a);
    else if (a == "--metrics")
      o.metrics = value(a);
    else if (a == "--plot")
      o.plot = value(a);
    else if (a == "--predictions")
      o.predictions = value(a);
    else if (a == "--distributed")
      o.distributed = true;
    else if (a == "--shard-table")
      o.shard_table = true;
    else if (o.command == "predict" && a.rfind("--", 0) != 0)
      o.texts.push_back(a);
    else
      throw std::invalid_argument("unknown option '" + a + "' (see --help)");
  }
  auto one_of = [](const std::string& flag, const std::string& v, std::vector<std::string> allowed) {
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
      throw std::invalid_argument(flag + ": '" + v + "' is not one of the choices (see --help)");
  };
  one_of("--mode", o.mode, {"embedding", "linear", "both"});
  one_of("--optim", o.optim, {"sgd", "adam"});
  one_of("--values", o.values, {"counts", "binary", "tfidf"});
  if (o.dim == 0 || o.batch == 0) throw std::invalid_argument("--dim and --batch must be at least 1");
  if (!(o.test_fraction > 0 && o.test_fraction < 1))
    throw std::invalid_argument("--test-fraction must be between 0 and 1");
  if (o.lr < 0) o.lr = o.optim == "sgd" ? 0.1 : 0.01;
  if (o.command == "predict" && o.load.empty()) throw std::invalid_argument("predict needs --load MODEL");
  if (!o.plot.empty()) check_plot_path(o.plot);
  if (o.shard_table && (!o.distributed || o.mode != "embedding" || o.values == "tfidf"))
    throw std::invalid_argument(
        "--shard-table needs --distributed and --mode embedding, with --values binary or counts (tf-idf "
        "normalises each row over all its columns, which no rank holds)");
  return o;
}

// ------------------------------------------------------------------ data

using Docs = std::vector<std::vector<int64_t>>;

// Turns documents into CSR rows with the chosen values (tf-idf needs the
// statistics fitted on the training set).
struct Featurizer {
  int64_t vocab = 0;
  std::string values;
  tg::data::Tfidf tfidf;

  tg::CsrBatch rows(const Docs& docs) const {
    if (values == "tfidf") return tfidf.transform(docs);
    return tg::data::to_csr(docs, vocab,
                            values == "binary" ? tg::data::CsrValues::binary : tg::data::CsrValues::counts);
  }
};

using Tokens = std::vector<std::vector<std::string>>;

// Documents are independent: they are tokenized and encoded on every thread
// (tg::parallel_for), each into its own slot, so the result is the same.
Tokens tokenize_all(const std::vector<std::string>& texts) {
  Tokens tokens(texts.size());
  tg::parallel_for(texts.size(), 16, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) tokens[i] = tg::data::tokenize(texts[i]);
  });
  return tokens;
}

Docs encode_all(const Tokens& tokens, const tg::data::Vocabulary& vocab) {
  Docs docs(tokens.size());
  tg::parallel_for(tokens.size(), 16, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) docs[i] = vocab.encode(tokens[i]);
  });
  return docs;
}

// ----------------------------------------------------------------- model

// One of the two ways, with its optimizer: `logits` builds the batch in the
// model's own input form (CSR or dense rows) and runs the forward pass.
struct Run {
  std::string mode;
  std::unique_ptr<EmbeddingModel> emb;
  std::unique_ptr<LinearModel> lin;
  std::unique_ptr<tg::optim::Optimizer> opt;
  dist::SyncStats traffic;       // --distributed: what this epoch's steps exchanged, summed
  double partial_sum_bytes = 0;  // --shard-table: the same, partial bag sums sent and received

  tg::nn::Module& module() { return emb ? static_cast<tg::nn::Module&>(*emb) : *lin; }

  Tensor logits(const Featurizer& f, const Docs& docs) {
    if (emb) return emb->forward(f.rows(docs));
    return lin->forward(Tensor(tg::data::to_dense(f.rows(docs))));  // [B, V] mostly zeros
  }
};

std::unique_ptr<tg::optim::Optimizer> make_optimizer(const Options& o, std::vector<Tensor> params) {
  if (o.optim == "sgd") {
    tg::optim::SGDOptions s;
    s.lr = o.lr;
    return std::make_unique<tg::optim::SGD>(std::move(params), s);
  }
  tg::optim::AdamOptions a;
  a.lr = o.lr;
  return std::make_unique<tg::optim::Adam>(std::move(params), a);
}

// The middle value: step times on a shared machine have long upper tails
// (another process got the core), which would swamp a mean.
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::size_t grad_bytes(const tg::nn::Module& m) {
  std::size_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.grad().nbytes();
  return n;
}

// With `distributed`, docs are this rank's share of the batch: the gradients are
// averaged over the ranks before the step. The loss is this rank's (train() makes
// it the whole batch's at the end of the epoch, in one exchange for all steps).
StepRecord train_step(Run& run, const Featurizer& f, const Docs& docs, const tg::Indices& y,
                      bool distributed) {
  const auto t0 = std::chrono::steady_clock::now();
  Tensor loss = tg::cross_entropy(run.logits(f, docs), y);
  run.opt->zero_grad();
  loss.backward();
  const std::size_t bytes = grad_bytes(run.module());
  if (distributed) {
    const dist::SyncStats s =
        dist::sync_gradients(run.module().parameters(), static_cast<double>(docs.size()));
    run.traffic.dense_bytes += s.dense_bytes;
    run.traffic.sparse_bytes_sent += s.sparse_bytes_sent;
    run.traffic.sparse_bytes_received += s.sparse_bytes_received;
    run.traffic.sparse_rows += s.sparse_rows;
  }
  run.opt->step();
  const auto t1 = std::chrono::steady_clock::now();
  StepRecord r;
  r.mode = run.mode;
  r.loss = loss.item();
  r.ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  r.grad_bytes = bytes;
  return r;
}

// Index of the largest value in row i of a [N, C] array.
int64_t argmax_row(const tg::Array& a, std::size_t i) {
  const std::size_t c = a.shape()[1];
  const float* row = a.data() + i * c;
  return std::max_element(row, row + c) - row;
}

struct Eval {
  double loss = 0, accuracy = 0, precision = 0, recall = 0;
  std::vector<int64_t> predicted;
};

// With `distributed`, each rank evaluates every N-th document and the counts are added up.
Eval evaluate(Run& run, const Featurizer& f, const Docs& docs, const std::vector<int64_t>& targets,
              std::vector<int64_t> ids, int64_t positive, bool distributed = false) {
  tg::NoGradGuard no_grad;
  Eval e;
  const std::size_t all_ids = ids.size();
  if (distributed) {
    std::vector<int64_t> mine;
    for (std::size_t i = dist::rank(); i < ids.size(); i += dist::world_size()) mine.push_back(ids[i]);
    ids = std::move(mine);
  }
  double tp = 0, fp = 0, fn = 0, correct = 0;
  for (std::size_t b = 0; b < ids.size(); b += 256) {
    const std::size_t end = std::min(ids.size(), b + 256);
    tg::Indices y = xt::adapt(tg::data::take(targets, ids, b, end));
    Tensor logits = run.logits(f, tg::data::take(docs, ids, b, end));
    e.loss += tg::cross_entropy(logits, y, tg::Reduction::sum).item();
    for (std::size_t i = 0; i < y.size(); ++i) {
      const int64_t p = argmax_row(logits.value(), i);
      e.predicted.push_back(p);
      correct += p == y(i);
      tp += p == positive && y(i) == positive;
      fp += p == positive && y(i) != positive;
      fn += p != positive && y(i) == positive;
    }
  }
  if (distributed) {
    double counts[5] = {e.loss, tp, fp, fn, correct};
    dist::all_reduce(counts);
    e.loss = counts[0], tp = counts[1], fp = counts[2], fn = counts[3], correct = counts[4];
  }
  const double n = std::max<std::size_t>(all_ids, 1);
  e.loss /= n;
  e.accuracy = correct / n;
  e.precision = tp + fp > 0 ? tp / (tp + fp) : 0.0;
  e.recall = tp + fn > 0 ? tp / (tp + fn) : 0.0;
  return e;
}

// --------------------------------------------------------- save and load

// --save writes a checkpoint (tg::save_checkpoint): the model in the embedding
// layout (a linear run is converted: bag.weight = proj.weight^T), its optimizer's
// state in the same layout, and in the metadata what predict and --load need.
const char* const bow_format = "tapegrad-bow 2";

// An optimizer's state with f applied to each array of the first parameter's
// (the table's) that has its shape: Adam's moments.
tg::optim::StateDict with_first(tg::optim::StateDict s, const std::function<tg::Array(const tg::Array&)>& f) {
  for (auto& [name, a] : s.tensors)
    if (name.rfind("state.0.", 0) == 0 && a.dimension() == 2) a = f(a);
  return s;
}

// A linear run's first parameter [D, V] is the embedding run's [V, D] transposed,
// and so are Adam's moments, element for element: transposing them is exact.
tg::optim::StateDict transpose_first(tg::optim::StateDict s) {
  return with_first(std::move(s), [](const tg::Array& a) { return tg::Array(xt::transpose(a)); });
}

// --shard-table: this rank's part of a whole model and its optimizer (its rows
// of the table and of the optimizer's state for them, the whole head), or the
// whole again from every rank's part (a collective: every rank calls it).
void reshard(std::unique_ptr<EmbeddingModel>& model, std::unique_ptr<tg::optim::Optimizer>& opt,
             const Options& o, const dist::RowShard& shard, int64_t vocab, bool split) {
  const auto rows = [&](const tg::Array& a) {
    return split ? shard.take(a) : dist::all_gather_rows(a, vocab, shard);
  };
  tg::Generator unused(0);
  const std::size_t table = split ? shard.rows(vocab) : vocab;
  auto next = std::make_unique<EmbeddingModel>(table, model->bag->embedding_dim(),
                                               model->head->out_features(), unused);
  next->load_state_dict({{"bag.weight", rows(model->bag->weight.value())},
                         {"head.weight", model->head->weight.value()},
                         {"head.bias", model->head->bias->value()}});
  if (split) next->sum_parts = dist::sum_over_ranks;
  auto next_opt = make_optimizer(o, next->parameters());
  next_opt->load_state_dict(with_first(opt->state_dict(), rows));
  model = std::move(next);
  opt = std::move(next_opt);
}

// A double as text that reads back to the same double.
std::string exact(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

struct Saved {  // what a checkpoint holds besides the model and the optimizer
  std::vector<std::string> labels;
  std::string values, optim;
  tg::data::Tfidf tfidf;
  tg::data::Vocabulary vocab;
  uint64_t seed = 0;
  double test_fraction = 0.2;
  std::size_t epoch = 0, vocab_size = 0, dim = 0;
};

void save_run(const std::string& path, Run& run, const Options& o, const Saved& s) {
  tg::Generator unused(0);
  std::unique_ptr<EmbeddingModel> converted;
  std::unique_ptr<tg::optim::Optimizer> converted_opt;
  tg::Checkpoint c{.model = run.emb.get(), .optimizer = run.opt.get()};
  if (!run.emb) {
    const std::size_t vocab = run.lin->proj->in_features(), dim = run.lin->proj->out_features();
    converted = std::make_unique<EmbeddingModel>(vocab, dim, s.labels.size(), unused);
    converted->load_state_dict({{"bag.weight", xt::transpose(run.lin->proj->weight.value())},
                                {"head.weight", run.lin->head->weight.value()},
                                {"head.bias", run.lin->head->bias->value()}});
    converted_opt = make_optimizer(o, converted->parameters());
    converted_opt->load_state_dict(transpose_first(run.opt->state_dict()));
    c = {.model = converted.get(), .optimizer = converted_opt.get()};
  }
  std::string joined;
  for (const std::string& l : s.labels) joined += (joined.empty() ? "" : "\t") + l;
  c.metadata = {{"format", bow_format},
                {"labels", joined},
                {"values", s.values},
                {"optim", s.optim},
                {"epoch", std::to_string(s.epoch)},
                {"seed", std::to_string(s.seed)},
                {"test_fraction", exact(s.test_fraction)}};
  if (s.values == "tfidf") {  // as text, not float32: a resumed run must compute the same features
    std::string idf;
    for (double x : s.tfidf.idf) idf += exact(x) + " ";
    c.metadata["idf"] = idf;
  }
  tg::save_checkpoint(path, c);
  s.vocab.save(path + ".vocab");
}

// Reads what a checkpoint says about itself; load_into() then loads the weights
// (and the optimizer's state) into a model built with these sizes.
Saved read_saved(const std::string& path) {
  const tg::StateDict tensors = tg::load_safetensors(path);
  tg::Metadata meta = tg::load_safetensors_metadata(path);
  if (meta["user.format"] != bow_format || !tensors.count("model.bag.weight") ||
      !tensors.count("model.head.weight"))
    throw std::runtime_error(path + ": not a checkpoint saved by bow_classifier --save");
  Saved s;
  std::istringstream labels(meta["user.labels"]);
  for (std::string l; std::getline(labels, l, '\t');) s.labels.push_back(l);
  s.values = meta["user.values"];
  s.optim = meta["user.optim"];
  s.epoch = std::stoul(meta["user.epoch"]);
  s.seed = std::stoull(meta["user.seed"]);
  s.test_fraction = std::stod(meta["user.test_fraction"]);
  std::istringstream idf(meta["user.idf"]);
  for (double x; idf >> x;) s.tfidf.idf.push_back(x);
  s.vocab = tg::data::Vocabulary::load(path + ".vocab");
  const tg::Array& w = tensors.at("model.bag.weight");
  s.vocab_size = w.shape()[0];
  s.dim = w.shape()[1];
  if (static_cast<int64_t>(s.vocab_size) != s.vocab.size())
    throw std::runtime_error(path + ": the weights have " + std::to_string(s.vocab_size) + " rows but " +
                             path + ".vocab has " + std::to_string(s.vocab.size()) + " tokens");
  if (tensors.at("model.head.weight").shape()[0] != s.labels.size())
    throw std::runtime_error(path + ": " + std::to_string(s.labels.size()) + " labels for " +
                             std::to_string(tensors.at("model.head.weight").shape()[0]) + " outputs");
  return s;
}

int predict(const Options& o) {
  Saved m = read_saved(o.load);
  tg::Generator gen(0);
  auto model = std::make_unique<EmbeddingModel>(m.vocab_size, m.dim, m.labels.size(), gen);
  tg::Checkpoint weights{.model = model.get()};
  tg::load_checkpoint(o.load, weights);
  Featurizer f{m.vocab.size(), m.values, m.tfidf};
  std::vector<std::string> texts = o.texts;
  if (texts.empty())
    for (std::string line; std::getline(std::cin, line);) texts.push_back(line);
  tg::NoGradGuard no_grad;
  const Docs docs = encode_all(tokenize_all(texts), m.vocab);
  Tensor probs = tg::softmax(model->forward(f.rows(docs)), 1);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const int64_t best = argmax_row(probs.value(), i);
    // Without a known word (an empty line, say) only the bias speaks: say so.
    std::printf("%s\t%.4f%s\n", m.labels[best].c_str(), probs.value()(i, best),
                docs[i].empty() ? "\t(no known words)" : "");
  }
  return 0;
}

// ----------------------------------------------------------------- train

// --test FILE: appends FILE's documents to the corpus (with the corpus' label
// ids) and returns the split "all of the corpus trains, FILE's documents test",
// so a split made elsewhere (and given to another tool too) can be replayed.
tg::data::Split append_test_file(tg::data::TsvData& corpus, const std::string& path) {
  tg::data::TsvOptions options;
  options.label_names = corpus.label_names;  // a label the training file lacks is an error
  tg::data::TsvData test = tg::data::read_tsv(path, options);
  tg::data::Split split;
  for (int64_t i = 0; i < corpus.size(); ++i) split.train.push_back(i);
  for (int64_t i = 0; i < test.size(); ++i) {
    split.test.push_back(corpus.size());
    corpus.texts.push_back(std::move(test.texts[i]));
    corpus.targets.push_back(test.targets[i]);
  }
  return split;
}

int train(Options o) {
  // Output paths are tried now: a typo must not cost the whole run.
  if (!o.save.empty()) {
    check_writable("--save", o.save);
    check_writable("--save", o.save + ".vocab");
  }
  if (!o.metrics.empty()) check_writable("--metrics", o.metrics);
  if (!o.plot.empty()) check_writable("--plot", o.plot);
  if (!o.predictions.empty()) check_writable("--predictions", o.predictions);

  // A resumed run takes its settings from the checkpoint: the same split, batch
  // order and features (the learning rate comes with the optimizer's state).
  std::unique_ptr<Saved> loaded;
  if (!o.load.empty()) {
    loaded = std::make_unique<Saved>(read_saved(o.load));
    if (loaded->optim != o.optim)
      throw std::runtime_error(o.load + " was trained with --optim " + loaded->optim +
                               "; resume it with that");
    o.seed = loaded->seed;
    o.test_fraction = loaded->test_fraction;
  }
  tg::data::TsvData corpus = tg::data::read_tsv(o.data);
  const std::size_t classes = corpus.label_names.size();
  if (classes < 2)
    throw std::runtime_error(o.data + ": needs at least two labels, found " + std::to_string(classes));
  tg::data::Split split = o.test.empty() ? tg::data::stratified_split(corpus.targets, o.test_fraction, o.seed)
                                         : append_test_file(corpus, o.test);
  const auto spam = std::find(corpus.label_names.begin(), corpus.label_names.end(), "spam");
  const int64_t positive = spam != corpus.label_names.end() ? spam - corpus.label_names.begin() : 1;

  tg::Generator gen(static_cast<tg::Generator::result_type>(o.seed));
  tg::data::Vocabulary vocab;
  Tokens tokens = tokenize_all(corpus.texts);
  if (loaded) {
    if (loaded->labels != corpus.label_names)
      throw std::runtime_error(o.load + ": saved labels differ from those in " + o.data);
    vocab = loaded->vocab;
  } else {
    Tokens train_tokens;  // lent by `tokens` for the build, then given back
    for (int64_t i : split.train) train_tokens.push_back(std::move(tokens[i]));
    tg::data::VocabularyOptions vo;
    vo.min_df = o.min_df;
    vo.max_size = static_cast<int64_t>(o.max_vocab);
    vo.unknown = tg::data::UnknownPolicy::drop;  // unseen words carry nothing a bag could use
    vocab = tg::data::Vocabulary::build(train_tokens, vo);
    for (std::size_t k = 0; k < split.train.size(); ++k) tokens[split.train[k]] = std::move(train_tokens[k]);
  }
  if (vocab.size() == 0) throw std::runtime_error("the vocabulary is empty: lower --min-df");
  const Docs docs = encode_all(tokens, vocab);
  // --shard-table: this rank's rows of the table, and each document's ids of
  // those rows as its table numbers them (once here, not at every step).
  std::optional<dist::RowShard> shard;
  if (o.shard_table) shard.emplace();
  const Docs sharded = shard ? shard->documents(docs, vocab.size()) : Docs{};
  const Docs& inputs = shard ? sharded : docs;  // what the batches are made of

  Featurizer f{vocab.size(), loaded ? loaded->values : o.values, {}};
  if (loaded)
    f.tfidf = loaded->tfidf;
  else if (f.values == "tfidf")
    f.tfidf = tg::data::Tfidf::fit(tg::data::take(docs, split.train), vocab.size());

  // Both runs start from the same weights (the linear model copies the embedding
  // model's) and, when resuming, the same optimizer state.
  auto first = std::make_unique<EmbeddingModel>(vocab.size(), loaded ? loaded->dim : o.dim, classes, gen);
  auto first_opt = make_optimizer(o, first->parameters());
  if (loaded) {
    tg::Checkpoint resume{.model = first.get(), .optimizer = first_opt.get()};
    tg::load_checkpoint(o.load, resume);
    o.lr = first_opt->lr();
  }
  // --shard-table: this rank keeps its rows of the table from here on (the
  // whole model was built, or loaded, first: the same start as one process's).
  if (shard) {
    reshard(first, first_opt, o, *shard, vocab.size(), /*split=*/true);
    f.vocab = shard->rows(vocab.size());
  }
  const std::size_t dim = first->bag->embedding_dim();
  std::vector<Run> runs;
  if (o.mode != "embedding") {
    Run r{"linear", nullptr, std::make_unique<LinearModel>(*first), nullptr, {}};
    r.opt = make_optimizer(o, r.module().parameters());
    if (loaded) r.opt->load_state_dict(transpose_first(first_opt->state_dict()));
    runs.push_back(std::move(r));
  }
  if (o.mode != "linear")
    runs.insert(runs.begin(), Run{"embedding", std::move(first), nullptr, std::move(first_opt), {}});

  std::printf("data: %s: %zu documents (%zu train, %zu test), %zu labels, vocabulary %lld, dim %zu\n",
              o.data.c_str(), corpus.texts.size(), split.train.size(), split.test.size(), classes,
              static_cast<long long>(vocab.size()), dim);
  std::printf("training: mode %s, %s lr %g, batch %zu, %zu epoch%s, values %s, seed %llu\n\n", o.mode.c_str(),
              o.optim.c_str(), o.lr, o.batch, o.epochs, o.epochs == 1 ? "" : "s", f.values.c_str(),
              static_cast<unsigned long long>(o.seed));
  // --distributed: every rank takes its share of each batch (DistributedSampler,
  // with the same order as the single-process run below), local batch --batch / N.
  const int world = dist::world_size();
  const bool split_batch = o.distributed && !o.shard_table;  // else every rank takes each batch whole
  if (split_batch && o.batch % world != 0)
    throw std::invalid_argument("--batch " + std::to_string(o.batch) + " does not split evenly over " +
                                std::to_string(world) + " processes");
  dist::DistributedSampler sampler(split.train,
                                   {.seed = o.seed * 1000, .num_replicas = world, .rank = dist::rank()});
  if (split_batch)
    std::printf("distributed: %d process%s, %zu documents of each batch of %zu per process\n\n", world,
                world == 1 ? "" : "es", o.batch / world, o.batch);
  if (o.shard_table)
    std::printf(
        "distributed: %d process%s, the table's %lld rows split across them (%lld on rank 0), every "
        "batch whole on each\n\n",
        world, world == 1 ? "" : "es", static_cast<long long>(vocab.size()), static_cast<long long>(f.vocab));

  std::printf("%-9s %5s %10s %9s %9s %9s %9s %10s %14s\n", "mode", "epoch", "train_loss", "test_loss",
              "accuracy", "precision", "recall", "ms/step", "grad_bytes/step");
  std::printf("(ms/step: median over the epoch; it includes building the batch)\n");

  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
  std::size_t step = 0;
  const std::size_t first_epoch = loaded ? loaded->epoch + 1 : 1;  // a resumed run numbers on
  for (std::size_t epoch = first_epoch; epoch < first_epoch + o.epochs; ++epoch) {
    // Same batch order for both runs: shuffle the training ids once per epoch.
    const auto epoch_start = std::chrono::steady_clock::now();
    std::vector<int64_t> order;
    for (int64_t i :
         tg::data::shuffled_indices(static_cast<int64_t>(split.train.size()), o.seed * 1000 + epoch))
      order.push_back(split.train[i]);
    std::vector<std::vector<int64_t>> shares;  // --distributed: this rank's batches
    if (split_batch) {
      sampler.set_epoch(epoch);
      shares = sampler.batches(o.batch / world);
    }
    const std::size_t batches = split_batch ? shares.size() : (order.size() + o.batch - 1) / o.batch;
    std::vector<EpochRecord> current(runs.size());
    std::vector<std::vector<double>> step_ms(runs.size());
    Progress progress("epoch " + std::to_string(epoch), batches);
    for (std::size_t b = 0; b < batches; ++b, ++step) {
      const std::vector<int64_t>& ids = split_batch ? shares[b] : order;
      const std::size_t begin = split_batch ? 0 : b * o.batch;
      const std::size_t end = split_batch ? ids.size() : std::min(order.size(), begin + o.batch);
      const Docs batch = tg::data::take(inputs, ids, begin, end);
      const tg::Indices y = xt::adapt(tg::data::take(corpus.targets, ids, begin, end));
      for (std::size_t r = 0; r < runs.size(); ++r) {  // interleaved: both see the same machine state
        StepRecord s = train_step(runs[r], f, batch, y, split_batch);
        if (o.shard_table)
          runs[r].partial_sum_bytes += static_cast<double>(world * batch.size() * dim * sizeof(float));
        s.epoch = static_cast<int>(epoch);
        s.step = step;
        if (!split_batch) current[r].train_loss += s.loss / batches;
        step_ms[r].push_back(s.ms);
        current[r].grad_bytes_per_step += static_cast<double>(s.grad_bytes) / batches;
        steps.push_back(s);
      }
      progress.update(b + 1, steps.back().loss);
    }
    progress.clear();   // the epoch's rows start on a clean line
    if (split_batch) {  // each step's loss over the whole batch: sum_r rows_r * loss_r / sum_r rows_r
      const std::size_t first_step = steps.size() - batches * runs.size();
      std::vector<double> sums;  // per step and run: rows * loss, then rows
      for (std::size_t k = first_step; k < steps.size(); ++k) {
        const double rows = static_cast<double>(shares[(k - first_step) / runs.size()].size());
        sums.insert(sums.end(), {steps[k].loss * rows, rows});
      }
      dist::all_reduce(sums);
      for (std::size_t k = first_step; k < steps.size(); ++k) {
        steps[k].loss = sums[2 * (k - first_step)] / sums[2 * (k - first_step) + 1];
        current[(k - first_step) % runs.size()].train_loss += steps[k].loss / batches;
      }
    }
    for (std::size_t r = 0; r < runs.size(); ++r) {
      Eval e = evaluate(runs[r], f, inputs, corpus.targets, split.test, positive, split_batch);
      EpochRecord& rec = current[r];
      rec.mode = runs[r].mode;
      rec.ms_per_step = median(step_ms[r]);
      rec.epoch = static_cast<int>(epoch);
      rec.test_loss = e.loss;
      rec.accuracy = e.accuracy;
      rec.precision = e.precision;
      rec.recall = e.recall;
      std::printf("%-9s %5zu %10.5f %9.5f %9.4f %9.4f %9.4f %10.3f %14.0f\n", rec.mode.c_str(), epoch,
                  rec.train_loss, rec.test_loss, rec.accuracy, rec.precision, rec.recall, rec.ms_per_step,
                  rec.grad_bytes_per_step);
      epochs.push_back(rec);
    }
    if (o.distributed) {  // what this rank exchanged per step, and the epoch's time
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
      for (Run& run : runs) {
        if (o.shard_table) {
          std::printf(
              "%-9s epoch %zu on %d process%s: %.3f s (training and test); per step, each rank sent "
              "its partial sums and received the others': %.0f bytes\n",
              run.mode.c_str(), epoch, world, world == 1 ? "" : "es", seconds,
              run.partial_sum_bytes / static_cast<double>(batches));
          run.partial_sum_bytes = 0;
          continue;
        }
        const double steps_done = static_cast<double>(batches), t = run.traffic.sparse_rows / steps_done;
        const double sparse =
            (run.traffic.sparse_bytes_sent + run.traffic.sparse_bytes_received) / steps_done;
        std::printf(
            "%-9s epoch %zu on %d process%s: %.3f s (training and test); per step, rank 0 exchanged "
            "%.0f bytes of dense gradients and %.0f of sparse rows (sent + received) for %.0f rows "
            "touched: %.2f x rows x dim x 4\n",
            run.mode.c_str(), epoch, world, world == 1 ? "" : "es", seconds,
            run.traffic.dense_bytes / steps_done, sparse, t, t > 0 ? sparse / (t * dim * 4) : 0.0);
        run.traffic = {};
      }
    }
  }

  if (runs.size() == 2) {
    double max_diff = 0;
    for (std::size_t i = 0; i + 1 < steps.size(); i += 2)
      max_diff = std::max(max_diff, std::abs(steps[i].loss - steps[i + 1].loss));
    std::vector<double> ms[2];
    double bytes[2] = {0, 0};
    for (std::size_t i = 0; i < steps.size(); ++i) {  // steps alternate: embedding, linear
      ms[i % 2].push_back(steps[i].ms);
      bytes[i % 2] += static_cast<double>(steps[i].grad_bytes);
    }
    std::printf("\nlargest loss difference between the two runs over %zu steps: %.3g\n", step, max_diff);
    std::printf("linear / embedding: %.1fx the time per step (medians), %.1fx the gradient bytes per step\n",
                median(ms[1]) / median(ms[0]), bytes[1] / std::max(bytes[0], 1.0));
    if (o.optim == "sgd")
      std::printf(
          "with SGD both runs apply the same update (absent rows have a zero gradient either way),\n"
          "so the curves agree up to float rounding.\n");
    else
      std::printf(
          "with Adam the runs differ on purpose: the linear run's dense gradient lets Adam keep moving\n"
          "rows of words that were not in the batch (their moments are not zero); the embedding run's\n"
          "sparse gradient updates only the rows in the batch (lazy Adam, like torch.optim.SparseAdam).\n");
  }

  Run& best = runs.front();
  if (shard && (!o.save.empty() || !o.predictions.empty())) {  // the whole model, for rank 0 to save
    reshard(best.emb, best.opt, o, *shard, vocab.size(), /*split=*/false);
    f.vocab = vocab.size();
  }
  if (dist::rank() > 0) return 0;  // rank 0 saves and writes; every rank holds the same model
  if (!o.save.empty()) {
    const Saved saved{corpus.label_names,        f.values, o.optim, f.tfidf, vocab, o.seed, o.test_fraction,
                      first_epoch + o.epochs - 1};
    save_run(o.save, best, o, saved);
    std::printf("saved the %s model to %s and %s.vocab\n", best.mode.c_str(), o.save.c_str(), o.save.c_str());
  }
  if (!o.predictions.empty()) {
    Eval e = evaluate(best, f, docs, corpus.targets, split.test, positive);
    std::ofstream out(o.predictions);
    for (std::size_t i = 0; i < split.test.size(); ++i)
      out << corpus.label_names[e.predicted[i]] << '\t' << corpus.texts[split.test[i]] << '\n';
    if (!out) throw std::runtime_error("cannot write " + o.predictions);
  }
  if (!o.metrics.empty()) write_metrics_csv(o.metrics, steps, epochs);
  if (!o.plot.empty()) std::printf("plot: %s\n", write_plot(o.plot, steps).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (o.distributed) {
      if (!dist::is_available())
        throw std::invalid_argument("--distributed: this build has no MPI (configure it with -Dmpi=enabled)");
      dist::init(argc, argv);
      if (dist::rank() > 0) std::freopen("/dev/null", "w", stdout);  // rank 0 prints
      if (o.threads == 0 && std::getenv("TAPEGRAD_NUM_THREADS") == nullptr)
        o.threads = 1;  // a core per process
    }
    use_threads(o.threads);
    const int status = o.command == "predict" ? predict(o) : train(o);
    dist::finalize();
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bow_classifier: %s%s\n",
                 dist::world_size() > 1 ? ("rank " + std::to_string(dist::rank()) + ": ").c_str() : "",
                 e.what());
    if (dist::world_size() > 1) dist::abort(2);  // the other ranks would wait for this one for ever
    dist::finalize();
    return 2;
  }
}
