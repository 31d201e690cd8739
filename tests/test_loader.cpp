// data/: minibatches (BatchSampler, take), the numeric CSV reader, accuracy().
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Indices;
using tg::Tensor;
using tg::test::TempDir;
using namespace tg::data;

namespace {

std::vector<int64_t> as_vector(const Indices& a) {
  return std::vector<int64_t>(a.begin(), a.end());
}

// Every batch of one pass, in order.
std::vector<std::vector<int64_t>> one_pass(BatchSampler& s) {
  std::vector<std::vector<int64_t>> out;
  for (const Indices& idx : s) out.push_back(as_vector(idx));
  return out;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST_SUITE("train") {
  TEST_CASE("BatchSampler without shuffle: positions in order, the last batch shorter unless dropped") {
    BatchSampler keep(7, {.batch_size = 3});
    CHECK(keep.size() == 3);
    CHECK(keep.num_samples() == 7);
    CHECK(one_pass(keep) == std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}, {6}});
    BatchSampler drop(7, {.batch_size = 3, .drop_last = true});
    CHECK(drop.size() == 2);
    CHECK(drop.num_samples() == 6);
    CHECK(one_pass(drop) == std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}});
    BatchSampler given(std::vector<int64_t>{9, 4, 7, 1}, {.batch_size = 2});
    CHECK(one_pass(given) == std::vector<std::vector<int64_t>>{{9, 4}, {7, 1}});
    BatchSampler empty(0, {.batch_size = 4});
    CHECK(empty.size() == 0);
    CHECK(one_pass(empty).empty());
    BatchSampler small(2, {.batch_size = 5, .drop_last = true});
    CHECK(one_pass(small).empty());
    CHECK_THROWS_WITH_AS(BatchSampler(3, {.batch_size = 0}), "BatchSampler: batch_size must be > 0; got 0",
                         std::invalid_argument);
  }

  TEST_CASE("BatchSampler with shuffle: a new permutation each pass, drawn from the generator") {
    tg::Generator gen(3);
    const std::vector<int64_t> split = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    BatchSampler s(split, {.batch_size = 4, .shuffle = true}, gen);
    std::set<std::vector<int64_t>> orders;
    for (int pass = 0; pass < 5; ++pass) {
      std::vector<int64_t> order;
      for (const auto& batch : one_pass(s)) order.insert(order.end(), batch.begin(), batch.end());
      CHECK(order.size() == split.size());
      CHECK(std::is_permutation(order.begin(), order.end(), split.begin()));
      orders.insert(order);
    }
    CHECK(orders.size() == 5);  // 11! orders: five equal ones would be a broken shuffle

    // The same generator state gives the same passes; the order depends only on it.
    tg::Generator a(42), b(42);
    BatchSampler x(100, {.batch_size = 7, .shuffle = true}, a), y(100, {.batch_size = 7, .shuffle = true}, b);
    CHECK(one_pass(x) == one_pass(y));
    CHECK(a.state() == b.state());
    b();  // the sampler shares b's state: its next pass differs
    CHECK(one_pass(x) != one_pass(y));

    // Each position is equally likely at the front: 20,000 passes over 4 positions.
    tg::Generator g(9);
    BatchSampler four(4, {.batch_size = 1, .shuffle = true}, g);
    std::vector<int> first(4, 0);
    for (int pass = 0; pass < 20000; ++pass) ++first[static_cast<std::size_t>((*four.begin())(0))];
    for (int count : first) CHECK(std::abs(count - 5000) < 300);  // about 4.6 standard deviations
  }

  TEST_CASE("take picks rows of Indices along dim 0, checking every position") {
    const Indices labels = {5, 6, 7, 8};
    CHECK(take(labels, Indices{3, 0, 0}) == Indices{8, 5, 5});
    const Indices contexts = {{1, 2, 3}, {4, 5, 6}};
    CHECK(take(contexts, Indices{1}) == Indices{{4, 5, 6}});
    CHECK(take(contexts, Indices(xt::zeros<int64_t>({0}))).shape() == std::vector<std::size_t>{0, 3});
    CHECK_THROWS_WITH_AS(take(labels, Indices{1, 4}), "take: rows[1] = 4 out of range for 4 rows",
                         std::out_of_range);
    CHECK_THROWS_WITH_AS(take(labels, Indices{-1}), "take: rows[0] = -1 out of range for 4 rows",
                         std::out_of_range);
    CHECK_THROWS_AS(take(labels, Indices(xt::zeros<int64_t>({1, 1}))), std::invalid_argument);
  }

  TEST_CASE("read_csv: features and labels, a header, another label column") {
    TempDir dir;
    const std::string path = dir.file("d.csv");
    write(path, "x1, x2 ,\"label\"\r\n0.5,-1,2\n\n  +3, 1e-3 , 0\n4,5,1.0\n");
    CsvData d = read_csv(path, {.header = true});
    CHECK(d.features.shape() == tg::Shape{3, 2});
    CHECK(d.features.value() == tg::Array{{0.5f, -1}, {3, 1e-3f}, {4, 5}});
    CHECK(d.labels == Indices{2, 0, 1});
    CHECK(d.feature_names == std::vector<std::string>{"x1", "x2"});
    CHECK(d.label_name == "label");
    CHECK(d.size() == 3);
    CHECK(d.num_classes() == 3);
    CHECK(!d.features.requires_grad());

    write(path, "1;0.25;7\n0;0.5;8\n");
    d = read_csv(path, {.label_column = 0, .delimiter = ';'});
    CHECK(d.labels == Indices{1, 0});
    CHECK(d.features.value() == tg::Array{{0.25f, 7}, {0.5f, 8}});
    CHECK(d.feature_names.empty());
    // 0.1 is read to the nearest float, as PyTorch's torch.tensor(0.1) holds it.
    write(path, "0.1,3.4028234e38,0\n");
    CHECK(read_csv(path).features.value()(0, 0) == 0.1f);
  }

  TEST_CASE(
      "read_csv: a number below float32's range reads as the nearest float, 0 or a subnormal, as NumPy") {
    TempDir dir;
    const std::string path = dir.file("tiny.csv");
    // NumPy's np.loadtxt(..., dtype=np.float32): 0, -0, 9.99995e-41, 0, 0, 1.4013e-45.
    const std::vector<std::string> fields = {"1e-50", "-1e-50", "1e-40", "7e-46", "1e-400", "1.5e-45"};
    std::string line;
    for (const std::string& f : fields) line += f + ",";
    write(path, line + "0\n");
    const CsvData d = read_csv(path);
    REQUIRE(d.features.shape() == tg::Shape{1, fields.size()});
    for (std::size_t i = 0; i < fields.size(); ++i) {
      CAPTURE(fields[i]);
      const float nearest = std::strtof(fields[i].c_str(), nullptr);  // C's correctly rounded reading
      const float got = d.features.value()(0, i);
      CHECK(got == nearest);
      CHECK(std::signbit(got) == std::signbit(nearest));
    }
    CHECK(std::signbit(d.features.value()(0, 1)));  // -1e-50 is -0
    CHECK(d.features.value()(0, 2) > 0);            // a subnormal, not 0
    // Past the largest float there is no nearest finite one: refused, as before.
    write(path, "1e39,0\n");
    CHECK_THROWS_WITH_AS(read_csv(path), doctest::Contains("'1e39' is not a finite number"),
                         tg::data::FileError);
  }

  TEST_CASE("read_csv: a header is skipped whatever it holds; skip_rows skips lines before it") {
    TempDir dir;
    const std::string path = dir.file("d.csv");
    // scikit-learn's breast_cancer.csv starts with rows, features and class names.
    write(path, "2,4,malignant,benign\n1.5,2,3,9,0\n4,5,6,9,1\n");
    CsvData d = read_csv(path, {.header = true});
    CHECK(d.features.value() == tg::Array{{1.5f, 2, 3, 9}, {4, 5, 6, 9}});
    CHECK(d.labels == Indices{0, 1});
    CHECK(d.feature_names.empty());  // 4 fields for 5 columns: not names
    CHECK(d.label_name.empty());
    // A header longer than the rows, or of one field, is skipped the same way.
    write(path, "a,b,c,d,e,f\n1,2,0\n");
    CHECK(read_csv(path, {.header = true}).labels == Indices{0});
    write(path, "my data\n1,2,0\n");
    CHECK(read_csv(path, {.header = true}).features.value() == tg::Array{{1, 2}});

    // skip_rows counts lines from the top, blank or not; the header is the line after.
    write(path, "# exported 2026\n\nx,y,label\n1,2,1\n");
    d = read_csv(path, {.header = true, .skip_rows = 2});
    CHECK(d.feature_names == std::vector<std::string>{"x", "y"});
    CHECK(d.label_name == "label");
    CHECK(d.labels == Indices{1});
    d = read_csv(path, {.skip_rows = 3});
    CHECK(d.labels == Indices{1});
    CHECK(d.feature_names.empty());
    // The label is the last column unless label_column says otherwise.
    write(path, "7,8,2\n");
    CHECK(read_csv(path).labels == Indices{2});
    CHECK(read_csv(path, {.label_column = 0}).labels == Indices{7});
  }

  TEST_CASE("accuracy: the share of rows whose largest logit is the label") {
    const Tensor logits({{0.1f, 2.0f, -1.0f}, {3.0f, 3.0f, 0.0f}, {0.0f, 0.0f, 5.0f}, {1.0f, 0.0f, 0.0f}});
    CHECK(accuracy(logits, Indices{1, 0, 2, 2}) == 0.75);  // ties go to the first largest: row 1 predicts 0
    CHECK(accuracy(logits, Indices{1, 1, 2, 0}) == 0.75);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    CHECK(accuracy(Tensor({{1.0f, nan, 5.0f}}), Indices{1}) ==
          1.0);  // NaN counts as the largest, as torch.argmax
    CHECK_THROWS_WITH_AS(accuracy(logits, Indices{0, 1}),
                         "accuracy: logits must be [N, C] and labels [N]; got [4, 3] and [2]",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(accuracy(logits, Indices{0, 1, 3, 0}), "accuracy: index 3 out of range for size 3",
                         std::out_of_range);
    CHECK_THROWS_AS(accuracy(Tensor(tg::Array(xt::zeros<float>({0, 3}))), Indices(xt::zeros<int64_t>({0}))),
                    std::invalid_argument);
  }

  TEST_CASE("a small training loop with the data helpers: a CSV in, the accuracy of a linear model out") {
    // Two blobs, written as a CSV, read back, split, batched, trained on.
    TempDir dir;
    tg::Generator gen(0);
    std::string text = "a,b,class\n";
    const Tensor noise = tg::randn({200, 2}, gen);
    for (std::size_t i = 0; i < 200; ++i)
      text += std::to_string(noise.value()(i, 0) + (i % 2 ? 3.0f : -3.0f)) + "," +
              std::to_string(noise.value()(i, 1)) + "," + std::to_string(i % 2) + "\n";
    write(dir.file("blobs.csv"), text);
    CsvData data = read_csv(dir.file("blobs.csv"), {.header = true});
    Split split = train_test_split(static_cast<int64_t>(data.size()), 0.25, 0);
    tg::nn::Linear model(2, 2, true, gen);
    tg::optim::SGD opt(model.parameters(), {.lr = 0.5});
    BatchSampler batches(split.train, {.batch_size = 16, .shuffle = true}, gen);
    for (int epoch = 0; epoch < 5; ++epoch)
      for (const Indices& idx : batches) {
        Tensor loss =
            tg::cross_entropy(model(tg::index_select(data.features, 0, idx)), take(data.labels, idx));
        opt.zero_grad();
        loss.backward();
        opt.step();
      }
    BatchSampler test(split.test, {.batch_size = split.test.size()});
    const Indices idx = *test.begin();
    tg::NoGradGuard no_grad;
    CHECK(accuracy(model(tg::index_select(data.features, 0, idx)), take(data.labels, idx)) > 0.9);
  }
}
