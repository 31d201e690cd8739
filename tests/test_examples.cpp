// The examples, run as a user runs them: the real binaries, their output files.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <tapegrad/io/safetensors.hpp>
#include <tapegrad/data/split.hpp>
#include <tapegrad/data/tsv.hpp>

#include "../examples/word2vec.hpp"
#include "helpers.hpp"

namespace {

namespace fs = std::filesystem;

using tg::test::run_command;
using tg::test::TempDir;

std::string bow() {
  return tg::test::example_path("bow_classifier");
}
std::string tiny() {
  return tg::test::source_path("tests/data/tiny_spam.tsv");
}

std::vector<std::vector<std::string>> read_csv(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream s(line);
    for (std::string c; std::getline(s, c, ',');) cells.push_back(c);
    if (!line.empty() && line.back() == ',') cells.push_back("");
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST_SUITE("examples") {
  TEST_CASE("bow_classifier --mode both with SGD: matching curves, better than the majority class") {
    TempDir tmp;
    const fs::path dir = tmp.path;
    const fs::path csv = dir / "metrics.csv", model = dir / "model.safetensors", preds = dir / "pred.tsv";
    auto r =
        run_command(bow() + " --data " + tiny() + " --mode both --optim sgd --lr 0.2 --epochs 30 --dim 8 " +
                    "--batch 4 --min-df 1 --metrics " + csv.string() + " --save " + model.string() +
                    " --predictions " + preds.string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("largest loss difference") != std::string::npos);

    // Per step, the two runs' losses agree (columns: kind,mode,epoch,step,loss,...).
    std::map<std::string, std::map<std::string, double>> loss;  // step -> mode -> loss
    std::map<std::string, double> final_accuracy;
    for (const auto& row : read_csv(csv)) {
      if (row[0] == "step") loss[row[3]][row[1]] = std::stod(row[4]);
      if (row[0] == "epoch") final_accuracy[row[1]] = std::stod(row[8]);
    }
    REQUIRE(loss.size() == 30 * 8);  // 32 training documents, batch 4, 30 epochs
    double max_diff = 0;
    for (auto& [step, by_mode] : loss) {
      REQUIRE(by_mode.size() == 2);
      max_diff = std::max(max_diff, std::abs(by_mode["embedding"] - by_mode["linear"]));
    }
    CHECK(max_diff < 1e-4);
    CHECK(loss.begin()->second["embedding"] > 0.5);           // it starts near ln 2 ...
    CHECK(std::prev(loss.end())->second["embedding"] < 0.2);  // ... and learns

    // The held-out accuracy beats always answering the most common test label.
    tg::data::TsvData d = tg::data::read_tsv(tiny());
    tg::data::Split split = tg::data::stratified_split(d.targets, 0.2, 0);
    std::map<int64_t, int> counts;
    for (int64_t i : split.test) counts[d.targets[i]]++;
    int majority = 0;
    for (auto& [label, n] : counts) majority = std::max(majority, n);
    const double majority_share = static_cast<double>(majority) / split.test.size();
    CHECK(final_accuracy["embedding"] > majority_share);
    CHECK(final_accuracy["linear"] == final_accuracy["embedding"]);

    // save -> predict gives the predictions the trained model made.
    std::ifstream in(preds);
    std::vector<std::string> labels;
    std::ofstream texts(dir / "texts.txt");
    for (std::string line; std::getline(in, line);) {
      labels.push_back(line.substr(0, line.find('\t')));
      texts << line.substr(line.find('\t') + 1) << '\n';
    }
    texts.close();
    REQUIRE(labels.size() == split.test.size());
    auto p = run_command(bow() + " predict --load " + model.string() + " < " + (dir / "texts.txt").string());
    INFO(p.output);
    REQUIRE(p.status == 0);
    std::stringstream lines(p.output);
    std::size_t i = 0;
    for (std::string line; std::getline(lines, line); ++i) {
      REQUIRE(i < labels.size());
      CHECK(line.substr(0, line.find('\t')) == labels[i]);
    }
    CHECK(i == labels.size());
  }

  TEST_CASE("bow_classifier with Adam: both learn; the curves differ only through lazy updates") {
    TempDir tmp;
    const fs::path dir = tmp.path;
    auto r =
        run_command(bow() + " --data " + tiny() + " --mode both --optim adam --epochs 10 --dim 8 --batch 4 " +
                    "--min-df 1 --metrics " + (dir / "m.csv").string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("lazy Adam") != std::string::npos);
    std::map<std::string, double> first, last;
    for (const auto& row : read_csv(dir / "m.csv"))
      if (row[0] == "step") {
        if (!first.count(row[1])) first[row[1]] = std::stod(row[4]);
        last[row[1]] = std::stod(row[4]);
      }
    CHECK(first["embedding"] == doctest::Approx(first["linear"]).epsilon(1e-5));  // same start
    CHECK(last["embedding"] < 0.5 * first["embedding"]);
    CHECK(last["linear"] < 0.5 * first["linear"]);
  }

  TEST_CASE("bow_classifier --test FILE replays a split written to two files") {
    // The split bow_classifier makes itself, written out: train.tsv in training
    // order, test.tsv in test order. Trained on train.tsv and tested on test.tsv,
    // it must see the same documents in the same order, so print the same metrics.
    TempDir tmp;
    const fs::path dir = tmp.path;
    tg::data::TsvData d = tg::data::read_tsv(tiny());
    tg::data::Split split = tg::data::stratified_split(d.targets, 0.2, 0);
    for (auto [name, ids] : {std::pair{"train.tsv", &split.train}, std::pair{"test.tsv", &split.test}}) {
      std::ofstream out(dir / name);
      for (int64_t i : *ids) out << d.label_names[d.targets[i]] << '\t' << d.texts[i] << '\n';
    }
    const std::string common = " --mode embedding --optim sgd --lr 0.2 --epochs 3 --dim 8 --batch 4 --min-df 1";
    auto whole = run_command(bow() + " --data " + tiny() + common + " --metrics " + (dir / "a.csv").string());
    auto files = run_command(bow() + " --data " + (dir / "train.tsv").string() + " --test " +
                             (dir / "test.tsv").string() + common + " --metrics " + (dir / "b.csv").string());
    INFO(whole.output);
    INFO(files.output);
    REQUIRE(whole.status == 0);
    REQUIRE(files.status == 0);
    const auto a = read_csv(dir / "a.csv"), b = read_csv(dir / "b.csv");
    REQUIRE(a.size() == 1 + 3 * 8 + 3);  // header, 32 / 4 steps a epoch, one line per epoch
    REQUIRE(b.size() == a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i][0] == b[i][0]);
      if (a[i][0] == "step") CHECK(a[i][4] == b[i][4]);  // loss
      if (a[i][0] == "epoch") {
        CHECK(a[i][7] == b[i][7]);  // test_loss
        CHECK(a[i][8] == b[i][8]);  // accuracy
      }
    }

    // A test label the training file does not have: the file and line are named.
    {
      std::ofstream out(dir / "odd.tsv");
      out << "ham\thello there\nphishing\tyour account\n";
    }
    auto r = run_command(bow() + " --data " + (dir / "train.tsv").string() + " --test " +
                         (dir / "odd.tsv").string() + common);
    CHECK(r.status == 2);
    CHECK(r.output.find("odd.tsv:2") != std::string::npos);
  }

  TEST_CASE("bow_classifier --load resumes exactly: 2 epochs + 1 resumed give the 3-epoch checkpoint") {
    TempDir tmp;
    const fs::path dir = tmp.path;
    const std::string common =
        " --data " + tiny() + " --optim adam --dim 8 --batch 4 --min-df 1 --values tfidf";
    for (const std::string mode : {"embedding", "linear"}) {
      CAPTURE(mode);
      const std::string full = (dir / (mode + "_full.ckpt")).string(),
                        half = (dir / (mode + "_half.ckpt")).string(),
                        resumed = (dir / (mode + "_resumed.ckpt")).string();
      const std::string run = bow() + common + " --mode " + mode;
      for (const std::string& command :
           {run + " --epochs 3 --save " + full, run + " --epochs 2 --save " + half,
            run + " --epochs 1 --load " + half + " --save " + resumed}) {
        auto r = run_command(command);
        INFO(command << "\n" << r.output);
        REQUIRE(r.status == 0);
      }
      auto read = tg::test::read_file;
      // Weights, Adam's moments and step counts, the epoch and the settings: byte for byte.
      CHECK(read(full).size() > 1000);
      CHECK(read(full) == read(resumed));
      CHECK(read(full + ".vocab") == read(resumed + ".vocab"));
      CHECK(read(full) != read(half));
    }
    // The resumed run says which epoch it trains, and refuses another optimizer.
    const std::string half = (dir / "embedding_half.ckpt").string();
    auto r = run_command(bow() + common + " --mode embedding --epochs 1 --load " + half);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("embedding     3 ") != std::string::npos);
    r = run_command(bow() + common + " --optim sgd --epochs 1 --load " + half);
    CHECK(r.status == 2);
    CHECK(r.output.find("was trained with --optim adam") != std::string::npos);
  }

  TEST_CASE("bow_classifier rejects bad input with a clear message") {
    auto r = run_command(bow() + " --mode sideways");
    CHECK(r.status == 2);
    CHECK(r.output.find("--mode: 'sideways'") != std::string::npos);
    r = run_command(bow() + " --data /nonexistent/file.tsv");
    CHECK(r.status == 2);
    CHECK(r.output.find("/nonexistent/file.tsv") != std::string::npos);
    r = run_command(bow() + " predict");
    CHECK(r.status == 2);
    CHECK(r.output.find("--load") != std::string::npos);
    r = run_command(bow() + " --epochs two");
    CHECK(r.status == 2);
    CHECK(r.output.find("not a number") != std::string::npos);
    // A table split needs the processes, the embedding run and values a rank can compute alone.
    for (const char* flags : {" --shard-table --mode embedding", " --distributed --shard-table --mode both",
                              " --distributed --shard-table --mode embedding --values tfidf"}) {
      CAPTURE(flags);
      r = run_command(bow() + flags);
      CHECK(r.status == 2);
      CHECK(r.output.find("--shard-table needs --distributed and --mode embedding") != std::string::npos);
    }
  }

  TEST_CASE("bow_classifier tries every output path before training, and refuses unknown plot formats") {
    TempDir tmp;
    const std::string args = " --data " + tiny() + " --epochs 1 --dim 4 --min-df 1";
    for (const std::string flag : {"--save", "--metrics", "--plot", "--predictions"}) {
      INFO(flag);
      const std::string bad = "/nonexistent/out" + std::string(flag == "--plot" ? ".png" : "");
      auto r = run_command(bow() + args + " " + flag + " " + bad);
      CHECK(r.status == 2);
      CHECK(r.output.find(flag + ": cannot write " + bad) != std::string::npos);
      CHECK(r.output.find("train_loss") == std::string::npos);  // it stopped before the table
    }
    auto r = run_command(bow() + args + " --metrics " + tmp.path.string());  // a directory
    CHECK(r.status == 2);
    CHECK(r.output.find("Is a directory") != std::string::npos);

    // The plot is drawn as .png or .svg: e.pdf is refused up front, not written as SVG.
    r = run_command(bow() + args + " --plot " + (tmp.path / "e.pdf").string());
    CHECK(r.status == 2);
    CHECK(r.output.find("--plot: " + (tmp.path / "e.pdf").string() + ": the plot is written as .png") !=
          std::string::npos);
    // Trying a path leaves nothing behind.
    CHECK(fs::is_empty(tmp.path));
  }

  TEST_CASE("bow_classifier output: 1 epoch, integer CSV cells, an SVG plot with ticks, no temporary files") {
    TempDir tmp;
    const fs::path csv = tmp.path / "m.csv", svg = tmp.path / "p.svg";
    auto r =
        run_command(bow() + " --data " + tiny() + " --mode both --epochs 1 --dim 4 --batch 4 --min-df 1" +
                    " --metrics " + csv.string() + " --plot " + svg.string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find(", 1 epoch, ") != std::string::npos);
    CHECK(r.output.find("plot: " + svg.string() + "\n") != std::string::npos);

    // grad_bytes (column 6) is a whole number of bytes in every row, step and epoch alike.
    int epochs = 0;
    for (const auto& row : read_csv(csv)) {
      if (row[0] != "step" && row[0] != "epoch") continue;
      epochs += row[0] == "epoch";
      INFO(row[0] << " row, grad_bytes '" << row[6] << "'");
      CHECK(!row[6].empty());
      CHECK(row[6].find_first_not_of("0123456789") == std::string::npos);
    }
    CHECK(epochs == 2);

    // Tick labels are short numbers (not 1.31463e-05), on both axes of both panels.
    const std::string text = tg::test::read_file(svg);
    std::size_t labels = 0;
    for (std::size_t at = 0; (at = text.find("text-anchor='end'>", at)) != std::string::npos; ++labels) {
      at += 18;
      const std::string label = text.substr(at, text.find('<', at) - at);
      INFO("y tick label '" << label << "'");
      CHECK(label.size() <= 6);
    }
    CHECK(labels >= 4);
    CHECK(text.find(">step</text>") != std::string::npos);
    // Only what was asked for is in the directory.
    std::set<std::string> files;
    for (const auto& e : fs::directory_iterator(tmp.path)) files.insert(e.path().filename().string());
    CHECK(files == std::set<std::string>{"m.csv", "p.svg"});
  }

  TEST_CASE("bow_classifier on a terminal: the progress bar is wiped before each epoch's rows") {
    if (run_command("command -v script").status != 0) return;  // util-linux's script gives us a terminal
    auto r = run_command("script -qec '" + bow() + " --data " + tiny() +
                         " --mode embedding --epochs 2 --dim 4 --min-df 1' /dev/null");
    INFO(r.output);
    REQUIRE(r.status == 0);
    int rows = 0;
    std::stringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      const std::size_t row = line.find("embedding ");
      if (row == std::string::npos || line.find("mode embedding") != std::string::npos) continue;
      ++rows;
      // What a terminal shows: the row at the start of a line that holds only blanks before it.
      REQUIRE(row > 0);
      CHECK(line[row - 1] == '\r');
      const std::size_t before = line.rfind('\r', row - 2);
      const std::string wiped =
          line.substr(before == std::string::npos ? 0 : before + 1, row - 1 - (before + 1));
      CHECK(wiped.find_first_not_of(' ') == std::string::npos);
    }
    CHECK(rows == 2);
  }

  TEST_CASE("bow_classifier predict marks a document without a known word") {
    TempDir tmp;
    const fs::path model = tmp.path / "m.safetensors";
    auto r = run_command(bow() + " --data " + tiny() +
                         " --mode embedding --epochs 1 --dim 4 --min-df 1 --save " + model.string());
    REQUIRE(r.status == 0);
    auto p =
        run_command("printf 'free money\\n\\nqqqzzz\\n' | " + bow() + " predict --load " + model.string());
    INFO(p.output);
    REQUIRE(p.status == 0);
    std::stringstream lines(p.output);
    std::vector<std::string> out;
    for (std::string line; std::getline(lines, line);) out.push_back(line);
    REQUIRE(out.size() == 3);  // one line per input line
    CHECK(out[0].find("(no known words)") == std::string::npos);
    CHECK(out[1].find("\t(no known words)") != std::string::npos);  // the empty line
    CHECK(out[2].find("\t(no known words)") != std::string::npos);  // unknown words only
  }
}

// ---- digits_mlp and names_mlp (docs/examples.md), the programs of the README's
// "Write your own training program" and its module program, run as a user runs them.
namespace {

// The rows of a per-epoch table ("epoch lr ..." then one line per epoch),
// keyed by epoch, each the line's numbers.
std::map<int, std::vector<double>> epoch_rows(const std::string& output) {
  std::map<int, std::vector<double>> rows;
  std::stringstream lines(output);
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    std::stringstream fields(line);
    std::string first;
    fields >> first;
    if (first == "epoch") {
      in_table = true;
      continue;
    }
    if (!in_table || first.empty() || first.find_first_not_of("0123456789") != std::string::npos) continue;
    std::vector<double> numbers;
    for (double x; fields >> x;) numbers.push_back(x);
    rows[std::stoi(first)] = numbers;
  }
  return rows;
}

// The text of `output` after `marker` up to the end of that line.
std::string line_after(const std::string& output, const std::string& marker) {
  const auto at = output.find(marker);
  if (at == std::string::npos) return "";
  const auto start = at + marker.size();
  return output.substr(start, output.find('\n', start) - start);
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Dev cross-entropy (nats per character) of a bigram count model with add-one
// smoothing, fitted on the first 90% of the names: what names_mlp has to beat.
double bigram_dev_loss(const std::vector<std::string>& names) {
  const std::size_t n_train = names.size() * 9 / 10;
  auto id = [](char c) { return c == '.' ? 0 : c - 'a' + 1; };
  std::vector<std::vector<double>> counts(27, std::vector<double>(27, 1.0));  // add one
  for (std::size_t i = 0; i < n_train; ++i) {
    int prev = 0;
    for (char c : names[i] + '.') counts[prev][id(c)] += 1, prev = id(c);
  }
  double total = 0;
  std::size_t n = 0;
  for (std::size_t i = n_train; i < names.size(); ++i) {
    int prev = 0;
    for (char c : names[i] + '.') {
      double row = 0;
      for (double x : counts[prev]) row += x;
      total -= std::log(counts[prev][id(c)] / row);
      ++n, prev = id(c);
    }
  }
  return total / static_cast<double>(n);
}

}  // namespace

TEST_SUITE("examples") {
  TEST_CASE("digits_mlp reaches a test accuracy of 0.97, and the README's program prints the same table") {
    auto r = run_command(tg::test::example_path("digits_mlp"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    const auto rows = epoch_rows(r.output);
    REQUIRE(rows.size() == 40);
    REQUIRE(rows.at(40).size() == 4);  // lr, train_loss, test_loss, accuracy
    CHECK(rows.at(40)[3] >= 0.97);
    CHECK(rows.at(40)[1] < 0.2 * rows.at(1)[1]);  // the training loss fell
    CHECK(rows.at(1)[0] == doctest::Approx(2e-3));
    CHECK(rows.at(40)[0] < 1e-5);  // the cosine schedule ends near 0

    // The README's program is compiled from README.md; run from the source root,
    // as the README says, it trains the same model on the same data.
    auto readme =
        run_command("cd " + tg::test::source_path(".") + " && " + tg::test::example_path("readme_digits"));
    INFO(readme.output);
    REQUIRE(readme.status == 0);
    CHECK(readme.output == r.output);
  }

  TEST_CASE("digits_mlp and names_mlp resume exactly, on 1 and 2 threads: stopped after K epochs and resumed = never stopped") {
    TempDir tmp;
    const fs::path dir = tmp.path;
    for (const std::string threads : {"1", "2"})
    for (const std::string name : {"digits_mlp", "names_mlp"}) {
      CAPTURE(name);
      CAPTURE(threads);
      const std::string exe = tg::test::example_path(name) + " --epochs 4 --threads " + threads;
      const std::string full = (dir / (name + "_full.ckpt")).string(),
                        half = (dir / (name + "_half.ckpt")).string(),
                        resumed = (dir / (name + "_resumed.ckpt")).string();
      auto a = run_command(exe + " --save " + full);
      auto b = run_command(exe + " --stop-after 2 --save " + half);
      auto c = run_command(exe + " --load " + half + " --save " + resumed);
      INFO(a.output << "\n---\n" << b.output << "\n---\n" << c.output);
      REQUIRE(a.status == 0);
      REQUIRE(b.status == 0);
      REQUIRE(c.status == 0);
      // Weights, Adam's moments and step counts, the schedule, the generator: byte for byte.
      CHECK(tg::test::read_file(full).size() > 1000);
      CHECK(tg::test::read_file(full) == tg::test::read_file(resumed));
      CHECK(tg::test::read_file(full) != tg::test::read_file(half));
      const auto rows_a = epoch_rows(a.output), rows_b = epoch_rows(b.output), rows_c = epoch_rows(c.output);
      REQUIRE(rows_a.size() == 4);
      REQUIRE(rows_b.size() == 2);
      REQUIRE(rows_c.size() == 2);  // epochs 3 and 4 only
      CHECK(rows_b.at(2) == rows_a.at(2));
      CHECK(rows_c.at(3) == rows_a.at(3));
      CHECK(rows_c.at(4) == rows_a.at(4));
      // names_mlp samples after training, from the generator the checkpoint restored.
      CHECK(line_after(c.output, "sampled:") == line_after(a.output, "sampled:"));
    }
  }

  TEST_CASE("digits_cnn: Conv2d, BatchNorm2d and MaxPool2d beat the MLP on the digits; resumed = never stopped") {
    auto r = run_command(tg::test::example_path("digits_cnn"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    const auto rows = epoch_rows(r.output);
    REQUIRE(rows.size() == 20);
    REQUIRE(rows.at(20).size() == 5);  // lr, train_loss, test_loss, accuracy, ms/step
    CHECK(rows.at(20)[3] >= 0.99);     // digits_mlp: 0.9861 on this split
    CHECK(rows.at(20)[1] < 0.1 * rows.at(1)[1]);

    // The checkpoint holds BatchNorm's running statistics (buffers) with the weights.
    TempDir tmp;
    const std::string exe = tg::test::example_path("digits_cnn") + " --epochs 3";
    const std::string full = tmp.file("full.ckpt"), half = tmp.file("half.ckpt"), resumed = tmp.file("resumed.ckpt");
    auto a = run_command(exe + " --save " + full);
    auto b = run_command(exe + " --stop-after 1 --save " + half);
    auto c = run_command(exe + " --load " + half + " --save " + resumed);
    INFO(a.output << "\n---\n" << b.output << "\n---\n" << c.output);
    REQUIRE((a.status == 0 && b.status == 0 && c.status == 0));
    CHECK(tg::test::read_file(full) == tg::test::read_file(resumed));
    const tg::StateDict state = tg::load_safetensors(full);
    CHECK(state.count("model.1.running_var") == 1);
    CHECK(state.at("model.1.num_batches_tracked")() == 3.0f * 45);  // 3 epochs of 45 batches
    auto numbers = [](std::vector<double> row) {  // all but ms/step
      row.pop_back();
      return row;
    };
    CHECK(numbers(epoch_rows(c.output).at(3)) == numbers(epoch_rows(a.output).at(3)));

    // --bench-steps times steps on one batch instead of training (scripts/steptime).
    auto bench = run_command("OPENBLAS_NUM_THREADS=1 " + tg::test::example_path("digits_cnn") + " --bench-steps 3");
    INFO(bench.output);
    REQUIRE(bench.status == 0);
    CHECK(bench.output.find("step_ms: ") != std::string::npos);
    CHECK(bench.output.find("epoch") == std::string::npos);
  }

  TEST_CASE("names_mlp on the bundled names: beats a bigram model on dev, samples 20 names") {
    const std::string data = tg::test::source_path("examples/data/names_sample.txt");
    auto r = run_command(tg::test::example_path("names_mlp") + " --data " + data);
    INFO(r.output);
    REQUIRE(r.status == 0);
    const auto rows = epoch_rows(r.output);
    REQUIRE(rows.size() == 10);
    REQUIRE(rows.at(10).size() == 3);  // lr, train_loss, dev_loss
    // Before training a prediction is near uniform over 27 characters: ln 27 = 3.30 nats.
    CHECK(rows.at(1)[1] < std::log(27.0));
    CHECK(rows.at(10)[1] < rows.at(1)[1] - 0.3);
    // Three characters of context beat one: the dev loss is below that of
    // bigram counts (add-one smoothing) fitted on the same train names.
    const double bigram = bigram_dev_loss(read_lines(data));
    CAPTURE(bigram);
    CHECK(bigram > 2.3);
    CHECK(rows.at(10)[2] < bigram - 0.05);

    std::stringstream sampled(line_after(r.output, "sampled:"));
    std::vector<std::string> names;
    for (std::string name; sampled >> name;) names.push_back(name);
    CHECK(names.size() >= 19);  // 20, one of which may be empty (the model ended it at once)
    for (const std::string& name : names)
      CHECK(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz") == std::string::npos);
  }

  TEST_CASE("digits_mlp and names_mlp reject bad flags and bad data, naming them") {
    TempDir tmp;
    const fs::path dir = tmp.path;
    auto r = run_command(tg::test::example_path("digits_mlp") + " --epoch 3");
    CHECK(r.status == 1);
    CHECK(r.output.find("digits_mlp: bad flag --epoch") != std::string::npos);
    for (const std::string value : {"two", "3x", "-1"}) {  // the flag is named, not std::stoi
      r = run_command(tg::test::example_path("names_mlp") + " --epochs " + value);
      CHECK(r.status == 1);
      CHECK(r.output.find("--epochs: not a whole number >= 0: '" + value + "'") != std::string::npos);
    }
    {
      std::ofstream out(dir / "names.txt");
      for (int i = 0; i < 20; ++i) out << (i == 12 ? "Anne-Marie" : "anna") << '\n';
    }
    r = run_command(tg::test::example_path("names_mlp") + " --data " + (dir / "names.txt").string());
    CHECK(r.status == 1);
    CHECK(r.output.find("names.txt:13: not a name of letters a-z") != std::string::npos);
    r = run_command(tg::test::example_path("names_mlp") + " --load " + (dir / "names.txt").string());
    CHECK(r.status == 1);
    CHECK(r.output.find("names.txt") != std::string::npos);
  }
}

// ---- names_gpt: the character-level transformer (docs/transformer.md), a few
// epochs on the bundled 600 names (17 steps an epoch).
TEST_SUITE("examples") {
  TEST_CASE("names_gpt resumes exactly on 1 and 2 threads, and its loss falls: 3 epochs = 1 epoch, stop, 2 resumed") {
    std::map<std::string, double> dev_loss;  // at epoch 3, by thread count
    for (const std::string threads : {"1", "2"}) {
    CAPTURE(threads);
    TempDir tmp;
    const std::string exe = tg::test::example_path("names_gpt") + " --epochs 3 --threads " + threads;
    const std::string full = tmp.file("full.ckpt"), half = tmp.file("half.ckpt"), resumed = tmp.file("resumed.ckpt");
    auto a = run_command(exe + " --save " + full);
    auto b = run_command(exe + " --stop-after 1 --save " + half);
    auto c = run_command(exe + " --load " + half + " --save " + resumed);
    INFO(a.output << "\n---\n" << b.output << "\n---\n" << c.output);
    REQUIRE(a.status == 0);
    REQUIRE(b.status == 0);
    REQUIRE(c.status == 0);
    // Weights, AdamW's moments and step counts, the generator (shuffling, dropout): byte for byte.
    CHECK(tg::test::read_file(full).size() > 100000);
    CHECK(tg::test::read_file(full) == tg::test::read_file(resumed));
    CHECK(tg::test::read_file(full) != tg::test::read_file(half));
    const auto rows_a = epoch_rows(a.output), rows_b = epoch_rows(b.output), rows_c = epoch_rows(c.output);
    REQUIRE(rows_a.size() == 3);
    REQUIRE(rows_b.size() == 1);
    REQUIRE(rows_c.size() == 2);  // epochs 2 and 3 only
    CHECK(rows_b.at(1) == rows_a.at(1));
    CHECK(rows_c.at(2) == rows_a.at(2));
    CHECK(rows_c.at(3) == rows_a.at(3));
    CHECK(line_after(c.output, "sampled:") == line_after(a.output, "sampled:"));

    // The warm-up: 51 of its 100 steps by the end of epoch 3, lr 3e-3 * 51 / 100.
    REQUIRE(rows_a.at(3).size() == 3);  // lr, train_loss, dev_loss
    CHECK(rows_a.at(3)[0] == doctest::Approx(3e-3 * 51 / 100).epsilon(1e-3));
    // From about ln 27 = 3.30 nats per character, the dev loss falls.
    CHECK(rows_a.at(1)[2] < std::log(27.0) + 0.1);
    CHECK(rows_a.at(3)[2] < rows_a.at(1)[2] - 0.3);
    std::stringstream sampled(line_after(a.output, "sampled:"));
    std::vector<std::string> names;
    for (std::string name; sampled >> name;) names.push_back(name);
    CHECK(names.size() >= 18);  // 20, some of which may be empty (the model ended it at once)
    for (const std::string& name : names) {
      CHECK(name.size() <= 15);
      CHECK(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz") == std::string::npos);
    }
    dev_loss[threads] = rows_a.at(3)[2];
    }
    // Two threads draw other dropout masks and round otherwise: close, not equal.
    CHECK(dev_loss["2"] == doctest::Approx(dev_loss["1"]).epsilon(0.02));
  }

  TEST_CASE("names_gpt --init-out writes the initial weights by name; --bench-steps times steps; bad input is named") {
    TempDir tmp;
    const std::string exe = tg::test::example_path("names_gpt");
    auto r = run_command(exe + " --epochs 1 --init-out " + tmp.file("init.safetensors"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    const std::string init = tg::test::read_file(tmp.file("init.safetensors"));
    for (const char* name : {"tok.weight", "pos.weight", "blocks.0.attn.query.weight", "blocks.1.fc2.bias", "ln.weight",
                             "head.weight"})
      CHECK(init.find(name) != std::string::npos);

    r = run_command("OPENBLAS_NUM_THREADS=1 " + exe + " --bench-steps 3");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("step_ms: ") != std::string::npos);
    CHECK(r.output.find(" cpu_ms: ") != std::string::npos);
    CHECK(r.output.find("epoch") == std::string::npos);  // no training table

    {
      std::ofstream out(tmp.file("names.txt"));
      for (int i = 0; i < 20; ++i) out << (i == 7 ? "bartholomewjameson" : "anna") << '\n';
    }
    r = run_command(exe + " --data " + tmp.file("names.txt"));
    CHECK(r.status == 1);
    CHECK(r.output.find("names.txt:8: not a name of 1 to 15 letters a-z") != std::string::npos);
    r = run_command(exe + " --heads 8");
    CHECK(r.status == 1);
    CHECK(r.output.find("names_gpt: bad flag --heads") != std::string::npos);
    r = run_command(exe + " --load " + tmp.file("names.txt"));
    CHECK(r.status == 1);
    CHECK(r.output.find("names.txt") != std::string::npos);
  }
}

// ---- names_gru: the character-level GRU (docs/examples.md), a few epochs on
// the bundled 600 names (17 steps an epoch).
TEST_SUITE("examples") {
  TEST_CASE("names_gru: its loss falls, and 3 epochs = 1 epoch, stop, 2 resumed, byte for byte") {
    TempDir tmp;
    const std::string exe = tg::test::example_path("names_gru") + " --epochs 3";
    const std::string full = tmp.file("full.ckpt"), half = tmp.file("half.ckpt"), resumed = tmp.file("resumed.ckpt");
    auto a = run_command(exe + " --save " + full + " --init-out " + tmp.file("init.safetensors"));
    auto b = run_command(exe + " --stop-after 1 --save " + half);
    auto c = run_command(exe + " --load " + half + " --save " + resumed);
    INFO(a.output << "\n---\n" << b.output << "\n---\n" << c.output);
    REQUIRE((a.status == 0 && b.status == 0 && c.status == 0));
    // The GRU's weights, Adam's moments and step counts, the schedule, the generator.
    CHECK(tg::test::read_file(full).size() > 100000);
    CHECK(tg::test::read_file(full) == tg::test::read_file(resumed));
    CHECK(tg::test::read_file(full) != tg::test::read_file(half));
    const auto rows_a = epoch_rows(a.output), rows_b = epoch_rows(b.output), rows_c = epoch_rows(c.output);
    REQUIRE(rows_a.size() == 3);
    REQUIRE(rows_b.size() == 1);
    REQUIRE(rows_c.size() == 2);  // epochs 2 and 3 only
    CHECK(rows_b.at(1) == rows_a.at(1));
    CHECK(rows_c.at(2) == rows_a.at(2));
    CHECK(rows_c.at(3) == rows_a.at(3));
    CHECK(line_after(c.output, "sampled:") == line_after(a.output, "sampled:"));

    REQUIRE(rows_a.at(3).size() == 3);  // lr, train_loss, dev_loss
    CHECK(rows_a.at(1)[0] == doctest::Approx(5e-3));
    // From about ln 27 = 3.30 nats per character, both losses fall.
    CHECK(rows_a.at(1)[2] < std::log(27.0));
    CHECK(rows_a.at(3)[1] < rows_a.at(1)[1] - 0.2);
    CHECK(rows_a.at(3)[2] < rows_a.at(1)[2] - 0.1);
    std::stringstream sampled(line_after(a.output, "sampled:"));
    std::vector<std::string> names;
    for (std::string name; sampled >> name;) names.push_back(name);
    CHECK(names.size() >= 18);  // 20, some of which may be empty (the model ended it at once)
    for (const std::string& name : names) CHECK(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz") == std::string::npos);

    // The initial weights by PyTorch's names (tests/tools/names_gru_reference.py --init loads them).
    const tg::StateDict init = tg::load_safetensors(tmp.file("init.safetensors"));
    for (const char* name : {"embed.weight", "gru.weight_ih_l0", "gru.weight_hh_l0", "gru.bias_ih_l0", "gru.bias_hh_l0",
                             "head.weight", "head.bias"})
      CHECK(init.count(name) == 1);
    CHECK(init.at("gru.weight_ih_l0").shape(0) == 384);  // r, z, n of 128 each
    CHECK(init.at("gru.weight_ih_l0").shape(1) == 16);

    auto r = run_command("OPENBLAS_NUM_THREADS=1 " + tg::test::example_path("names_gru") + " --bench-steps 3");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("step_ms: ") != std::string::npos);
    CHECK(r.output.find("epoch") == std::string::npos);  // no training table
  }
}

TEST_SUITE("examples") {
  TEST_CASE("the README's module program trains, and its checkpoint and clone give the trained model's outputs") {
    // Compiled from README.md like readme_digits; what it prints is also the
    // README's block, which scripts/readme --check compares line by line.
    auto r = run_command("cd " + tg::test::source_path(".") + " && " + tg::test::example_path("readme_module"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("parameters: hidden.weight[8, 2] hidden.bias[8] out.weight[2, 8] out.bias[2]\n") !=
          std::string::npos);
    CHECK(r.output.find("predicted tensor([0, 1, 1, 0], shape=[4]) for 4 inputs") != std::string::npos);
    CHECK(r.output.find("loaded == trained: true, clone == trained: true, clone shares a tensor with it: false\n") !=
          std::string::npos);
    double loss100 = 0, loss200 = 0;
    REQUIRE(std::sscanf(line_after(r.output, "step 100").c_str(), "  loss %lf", &loss100) == 1);
    REQUIRE(std::sscanf(line_after(r.output, "step 200").c_str(), "  loss %lf", &loss200) == 1);
    CHECK(loss100 < 0.01);  // XOR learnt: ln 2 = 0.69 at chance
    CHECK(loss200 < loss100);
  }

  TEST_CASE("the README's threads program learns, and ends with the same table on one thread and on every core") {
    auto r = run_command(tg::test::example_path("readme_threads"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("the same embedding table after both runs: true\n") != std::string::npos);
    const std::string one = line_after(r.output, "on 1 thread:");
    REQUIRE(one.find("last loss ") != std::string::npos);
    const float loss = std::stof(one.substr(one.find("last loss ") + 10));
    CHECK(loss < 0.01f);  // the classes are told apart: ln 2 = 0.69 at chance
  }

  TEST_CASE("every example program answers --help with its flags and their defaults, and exits with 0") {
    // The programs examples/meson.build builds, but the README's own (compiled from its text).
    std::vector<std::string> programs;
    std::ifstream build(tg::test::source_path("examples/meson.build"));
    for (std::string line; std::getline(build, line);) {
      const std::size_t at = line.find("executable('");
      if (at == std::string::npos) continue;
      const std::string name = line.substr(at + 12, line.find('\'', at + 12) - at - 12);
      if (name.rfind("readme_", 0) != 0) programs.push_back(name);
    }
    REQUIRE(programs.size() >= 9);
    for (const std::string& name : programs) {
      CAPTURE(name);
      for (const std::string flag : {"--help", "-h"}) {
        const auto r = run_command(tg::test::example_path(name) + " " + flag);
        CHECK(r.status == 0);
        CHECK(r.output.rfind("usage:", 0) == 0);
        CHECK(r.output.find(name) != std::string::npos);
        CHECK(r.output.size() < 4000);  // the usage, not a run
      }
    }
    // The flags and their defaults, where flags.hpp reads them.
    auto help = run_command(tg::test::example_path("digits_mlp") + " --help").output;
    CHECK(help.find("\n  --epochs       40\n") != std::string::npos);  // the column fits --distributed
    CHECK(help.find("\n  --seed         0\n") != std::string::npos);
    CHECK(help.find("\n  --save         (not set)\n") != std::string::npos);
    CHECK(help.find("\n  --distributed  (a switch: off unless given)\n") != std::string::npos);
    help = run_command(tg::test::example_path("backprop_by_hand") + " --help").output;
    CHECK(help.find("\n  --dot   (not set)\n  --html  (not set)\n") != std::string::npos);
    CHECK(run_command(tg::test::example_path("xor_mlp") + " --help").output.find("It takes no flags.") !=
          std::string::npos);
    // A flag a program does not take is still refused.
    CHECK(run_command(tg::test::example_path("xor_mlp") + " --epochs 3").status == 2);
    CHECK(run_command(tg::test::example_path("bow_classifier") + " --help").output.find("--epochs N") !=
          std::string::npos);
  }

  TEST_CASE("programs written against the previous release's names and header paths still compile and work") {
    // tests/previous_api/: nn_safetensors.cpp uses the tg::nn safetensors
    // names; moved_headers.cpp includes core/debug.hpp, core/gradcheck.hpp,
    // core/parallel.hpp and core/safetensors.hpp alone and calls Grad::add.
    // tests/consumer/run checks that each old name warns with the new one.
    TempDir tmp;
    auto run_in_tmp = [&](const std::string& program) {
      auto r = run_command(std::string(TAPEGRAD_BUILD_DIR) + "/tests/previous_api_" + program + " " +
                           tmp.path.string());
      INFO(program);
      INFO(r.output);
      REQUIRE(r.status == 0);
      return r.output;
    };
    const std::string safetensors = run_in_tmp("nn_safetensors");
    CHECK(safetensors.find("state dict: 2 tensors, the same weights: yes, epoch 3\n") != std::string::npos);
    CHECK(safetensors.find("saved again: 2 tensors\n") != std::string::npos);
    CHECK(safetensors.find("a missing file: SafetensorsError for " +
                           (tmp.path / "model.safetensors.missing").string()) != std::string::npos);
    CHECK(run_in_tmp("moved_headers") ==
          "threads: 2\n"
          "to_dot names tanh: yes\n"
          "gradcheck: passed\n"
          "Grad::add doubled the gradient: yes\n"
          "the same weights after a reload: yes\n");
  }

  TEST_CASE("the digits and names outputs that README.md and docs/examples.md show are what the programs print") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    MESSAGE("sanitizer build: the outputs are pasted from, and checked against, the release build");
    return;
#endif
    // The ```text block after `marker` in the file at `path` (from the source root).
    auto block_after = [&](const std::string& path, const std::string& marker) {
      const std::string page = tg::test::read_file(tg::test::source_path(path));
      const std::size_t at = page.find(marker);
      REQUIRE(at != std::string::npos);
      const std::size_t begin = page.find("```text\n", at) + 8;
      return page.substr(begin, page.find("```", begin) - begin);
    };
    const std::string root = "cd " + tg::test::source_path(".") + " && ";

    // Digits (README.md): the rows shown (the middle ones are left out) are rows the program prints.
    auto digits = run_command(root + tg::test::example_path("digits_mlp"));
    REQUIRE(digits.status == 0);
    std::stringstream shown(block_after("README.md", "<!-- digits-output:begin -->"));
    int rows = 0;
    for (std::string line; std::getline(shown, line);) {
      if (line == "  ...") continue;
      CAPTURE(line);
      CHECK(digits.output.find(line + "\n") != std::string::npos);
      ++rows;
    }
    CHECK(rows == 10);

    // Names (docs/examples.md): the whole run on the bundled sample, as pasted.
    auto names =
        run_command(root + tg::test::example_path("names_mlp") + " --data examples/data/names_sample.txt");
    REQUIRE(names.status == 0);
    CHECK(names.output == block_after("docs/examples.md",
                                      "`./build/examples/names_mlp --data examples/data/names_sample.txt`:"));
  }
}

TEST_SUITE("examples") {
  TEST_CASE("word2vec trains on the bundled Brown sample, writes a .vec file and prints neighbours") {
    const std::string program = tg::test::example_path("word2vec");
    const std::string data = tg::test::source_path("tests/data/brown_sample");
    const std::string vec = (std::filesystem::temp_directory_path() / "test_examples_word2vec.vec").string();
    for (const std::string model : {"--model skipgram", "--model cbow", "--subwords --bucket 1000"}) {
      CAPTURE(model);
      const auto r = run_command(program + " --data " + data + " " + model +
                                 " --min-count 1 --dim 8 --epochs 2 --sample 0 --output " + vec +
                                 " --neighbours jury,zzz");
      REQUIRE(r.status == 0);
      CHECK(r.output.find("(tagged): 4 sentences, 115 words; vocabulary ") != std::string::npos);
      CHECK(r.output.find("epoch 2  loss ") != std::string::npos);
      CHECK(r.output.find("nearest to jury: ") != std::string::npos);
      const std::size_t count = std::stoul(r.output.substr(r.output.find("vocabulary ") + 11));
      const w2v::VecFile f = w2v::read_vec(vec);
      CHECK(f.words.size() == count);
      CHECK(f.vectors.at(0).size() == 8);
      if (model.find("subwords") == std::string::npos)
        CHECK(r.output.find("zzz: not in the vocabulary") != std::string::npos);
      else  // fastText's model makes a vector for any word from its n-grams
        CHECK(r.output.find("nearest to zzz (from its n-grams): ") != std::string::npos);
    }
    std::filesystem::remove(vec);
    const auto bad = run_command(program + " --data " + data + " --model glove");
    CHECK(bad.status == 1);
    CHECK(bad.output.find("--model: skipgram or cbow") != std::string::npos);
    // No word seen --min-count times: refused with the reason (the sampler wants 2 words at least).
    const auto one_word = run_command(program + " --data " + data + " --min-count 100000");
    CHECK(one_word.status == 1);
    CHECK(one_word.output.find("at least 2 words; this one has 0 (lower --min-count") != std::string::npos);
    const auto missing = run_command(program + " --data /nonexistent/brown");
    CHECK(missing.status == 1);
    CHECK(missing.output.find("./scripts/fetch-brown") != std::string::npos);
  }

  TEST_CASE(
      "word2vec --data-parallel on 2 threads: the same vectors every run; refused with Adam or --hogwild") {
    const std::string program = tg::test::example_path("word2vec");
    const std::string data = tg::test::source_path("tests/data/brown_sample");
    const std::string common = " --data " + data + " --min-count 1 --dim 8 --epochs 2 --sample 0 --batch 20";
    std::vector<w2v::VecFile> runs;
    for (int run = 0; run < 2; ++run) {
      const std::string vec =
          (std::filesystem::temp_directory_path() / ("test_examples_w2v_dp" + std::to_string(run) + ".vec"))
              .string();
      const auto r = run_command(program + common + " --threads 2 --data-parallel --output " + vec);
      REQUIRE(r.status == 0);
      CHECK(r.output.find("2 threads (data parallel)") != std::string::npos);
      runs.push_back(w2v::read_vec(vec));
      std::filesystem::remove(vec);
    }
    CHECK(runs[0].vectors == runs[1].vectors);
    const auto adam = run_command(program + common + " --threads 2 --data-parallel --optim adam");
    CHECK(adam.status == 1);
    CHECK(adam.output.find("--data-parallel trains with SGD only") != std::string::npos);
    const auto both = run_command(program + common + " --threads 2 --data-parallel --hogwild");
    CHECK(both.status == 1);
    CHECK(both.output.find("--hogwild or --data-parallel, not both") != std::string::npos);
  }
}
