// The MPI suite: run by mpirun on 2 and 3 processes (tests/meson.build), every rank
// running every test case in the same order, since each one calls collectives.
//
//   mpirun -np 3 build-mpi/tests/test_mpi               the doctest cases below
//   mpirun -np 2 build-mpi/tests/test_mpi --throw-at 3  rank 1 throws at step 3 (run_throw.py)
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/distributed/distributed.hpp>
#include <tapegrad/distributed/sampler.hpp>
#include <tapegrad/distributed/shard.hpp>
#include <tapegrad/tapegrad.hpp>

namespace dist = tg::distributed;

namespace {

// Every rank's value of x, in rank order.
std::vector<double> gather(double x) {
  std::vector<double> all(dist::world_size(), 0.0);
  all[dist::rank()] = x;
  dist::all_reduce(all);
  return all;
}

// The float bits of every value, summed: two tensors with the same bits have the same checksum.
double checksum(const std::vector<tg::Tensor>& params) {
  double s = 0;
  for (const tg::Tensor& p : params)
    for (float v : p.to_vector()) s += std::bit_cast<uint32_t>(v);
  return s;
}

// A toy bag-of-words task: 22 documents of 3 to 6 word ids in [0, 40) (ids 40..49
// never occur), 3 classes, the same data on every rank.
struct Task {
  std::vector<std::vector<int64_t>> docs;
  std::vector<int64_t> labels;
  Task() {
    uint64_t x = 12345;
    auto next = [&x] { return (x = x * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
    for (int d = 0; d < 22; ++d) {
      std::vector<int64_t> doc;
      const int len = 3 + next() % 4;
      for (int k = 0; k < len; ++k) doc.push_back(static_cast<int64_t>(next() % 40));
      std::sort(doc.begin(), doc.end());
      doc.erase(std::unique(doc.begin(), doc.end()), doc.end());
      docs.push_back(doc);
      labels.push_back(doc.front() % 3);
    }
  }
  tg::CsrBatch batch(const std::vector<int64_t>& idx) const {
    std::vector<std::vector<int64_t>> picked;
    for (int64_t i : idx) picked.push_back(docs[i]);
    return tg::data::to_csr(picked, 50, tg::data::CsrValues::counts);
  }
  tg::Indices targets(const std::vector<int64_t>& idx) const {
    std::vector<int64_t> y;
    for (int64_t i : idx) y.push_back(labels[i]);
    return tg::indices(y);
  }
};

struct Model {
  tg::Generator gen{7};
  tg::nn::EmbeddingBag bag{50, 4, {.mode = tg::nn::EmbeddingBagMode::sum, .sparse = true}, gen};
  tg::nn::Linear head{4, 3, true, gen};
  std::vector<tg::Tensor> params() { return {bag.weight, head.weight, *head.bias}; }
  tg::Tensor loss(const Task& t, const std::vector<int64_t>& idx) {
    return tg::cross_entropy(head(tg::tanh(bag.forward(t.batch(idx)))), t.targets(idx));
  }
};

std::unique_ptr<tg::optim::Optimizer> make_opt(const std::string& kind,
                                               const std::vector<tg::Tensor>& params) {
  if (kind == "sgd") return std::make_unique<tg::optim::SGD>(params, tg::optim::SGDOptions{.lr = 0.5});
  return std::make_unique<tg::optim::Adam>(params, tg::optim::AdamOptions{.lr = 0.05});
}

struct Curve {
  std::vector<double> losses;  // the global batch's mean loss, per step
  std::vector<tg::Tensor> params;
  std::vector<std::size_t> local_batch_sizes;
};

// `epochs` epochs on this world, local batch b; each step's loss is the global batch's mean.
Curve train_distributed(const Task& t, const std::string& opt_kind, std::size_t b, int epochs) {
  Model m;
  auto opt = make_opt(opt_kind, m.params());
  dist::DistributedSampler sampler(t.docs.size(), {.seed = 3});
  Curve c;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    sampler.set_epoch(epoch);
    for (const std::vector<int64_t>& idx : sampler.batches(b)) {
      tg::Tensor loss = m.loss(t, idx);
      opt->zero_grad();
      loss.backward();
      dist::sync_gradients(m.params(), static_cast<double>(idx.size()));
      opt->step();
      double sums[2] = {loss.item() * idx.size(), static_cast<double>(idx.size())};
      dist::all_reduce(sums);
      c.losses.push_back(sums[0] / sums[1]);
      c.local_batch_sizes.push_back(idx.size());
    }
  }
  c.params = m.params();
  return c;
}

// The sampler's whole list in global batches of b * world, every rank taking
// the same batches: the same run on this process alone (train_alone), or on
// every rank of a table split by rows (ShardedModel).
template <class M>
Curve train_global_batches(M& m, const Task& t, const std::string& opt_kind, std::size_t b, int epochs) {
  auto opt = make_opt(opt_kind, m.params());
  dist::DistributedSampler sampler(t.docs.size(), {.seed = 3});
  Curve c;
  const std::size_t global = b * dist::world_size();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const std::vector<int64_t> order = sampler.global_order();
    for (std::size_t at = 0; at < order.size(); at += global) {
      std::vector<int64_t> idx(order.begin() + at, order.begin() + std::min(order.size(), at + global));
      tg::Tensor loss = m.loss(t, idx);
      opt->zero_grad();
      loss.backward();
      opt->step();
      c.losses.push_back(loss.item());
    }
  }
  c.params = m.params();
  return c;
}

Curve train_alone(const Task& t, const std::string& opt_kind, std::size_t b, int epochs) {
  Model m;
  return train_global_batches(m, t, opt_kind, b, epochs);
}

double max_diff(const std::vector<tg::Tensor>& a, const std::vector<tg::Tensor>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].to_vector(), y = b[i].to_vector();
    for (std::size_t k = 0; k < x.size(); ++k) d = std::max(d, std::abs(double(x[k]) - double(y[k])));
  }
  return d;
}

tg::Tensor with_dense_grad(tg::Shape shape, float value) {
  tg::Tensor p = tg::zeros(shape, true);
  tg::Array g = tg::Array::from_shape(shape);
  g.fill(value);
  p.accumulate_grad(tg::Grad(std::move(g)));
  return p;
}

tg::SparseRows rows_of(std::vector<int64_t> rows, std::vector<float> values, std::size_t num_rows,
                       std::size_t cols) {
  tg::SparseRows s{std::move(rows), xt::xtensor<float, 2>::from_shape({values.size() / cols, cols}),
                   num_rows};
  std::copy(values.begin(), values.end(), s.values.data());
  return s;
}

}  // namespace

TEST_CASE("every rank has its own rank, and the world is the size mpirun gave") {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  REQUIRE(size != nullptr);
  CHECK(dist::world_size() == std::atoi(size));
  CHECK(dist::world_size() >= 2);
  const std::vector<double> ranks = gather(dist::rank());
  for (int r = 0; r < dist::world_size(); ++r) CHECK(ranks[r] == r);
  CHECK(dist::is_available());
}

TEST_CASE("dense gradients: the mean over ranks, weighted by samples, in one buffer") {
  const int n = dist::world_size(), me = dist::rank();
  tg::Tensor w = with_dense_grad({2, 3}, static_cast<float>(me + 1));
  tg::Tensor b = with_dense_grad({3}, 10.0f * (me + 1));
  tg::Tensor unused = tg::zeros({4}, true);  // no gradient anywhere: stays empty
  tg::Tensor some = tg::zeros({2}, true);    // a gradient on rank 1 only: zeros elsewhere
  if (me == 1) some = with_dense_grad({2}, 6.0f);
  dist::SyncStats s = dist::sync_gradients({w, b, unused, some});
  CHECK(s.dense_values == 6 + 3 + 2);
  CHECK(s.dense_bytes == 44);
  CHECK(s.sparse_bytes_sent == 0);
  CHECK(unused.grad().empty());
  const double mean = (n + 1) / 2.0;  // of 1, 2, ..., n
  for (float v : w.grad_dense()) CHECK(v == doctest::Approx(mean).epsilon(1e-6));
  for (float v : b.grad_dense()) CHECK(v == doctest::Approx(10 * mean).epsilon(1e-6));
  for (float v : some.grad_dense()) CHECK(v == doctest::Approx(6.0 / n).epsilon(1e-6));

  // Rank r had r + 1 rows in its batch: sum (r+1) * (r+1) / sum (r+1).
  tg::Tensor x = with_dense_grad({5}, static_cast<float>(me + 1));
  dist::sync_gradients({x}, me + 1);
  double num = 0, den = 0;
  for (int r = 1; r <= n; ++r) num += r * r, den += r;
  for (float v : x.grad_dense()) CHECK(v == doctest::Approx(num / den).epsilon(1e-6));
  // Every rank ends with the same bits.
  const std::vector<double> sums = gather(checksum({tg::Tensor(x.grad_dense())}));
  for (double v : sums) CHECK(v == sums[0]);
}

TEST_CASE("sparse gradients stay sparse: rows gathered, shared rows summed in rank order") {
  const int n = dist::world_size(), me = dist::rank();
  // Rank r's gradient of a [10, 2] table: row r holds r + 1, row 7 holds 10 (r + 1).
  auto part = [](int r) {
    std::vector<int64_t> rows = {r, 7};
    if (r == 7) rows = {7};
    std::vector<float> v = {float(r + 1), float(r + 1)};
    if (r != 7) v.insert(v.end(), {10.0f * (r + 1), 10.0f * (r + 1)});
    return rows_of(rows, v, 10, 2);
  };
  tg::Tensor table = tg::zeros({10, 2}, true);
  table.accumulate_grad(tg::Grad(part(me)));
  tg::Tensor head = with_dense_grad({2}, 1.0f);
  dist::SyncStats s = dist::sync_gradients({table, head});
  REQUIRE(table.grad().is_sparse());
  const tg::SparseRows& g = table.grad().sparse();
  std::vector<int64_t> expected_rows;
  for (int r = 0; r < n; ++r) expected_rows.push_back(r);
  expected_rows.push_back(7);
  CHECK(g.rows == expected_rows);
  CHECK(s.sparse_rows == static_cast<std::size_t>(n + 1));
  CHECK(s.sparse_rows_sent == 2);
  CHECK(s.sparse_bytes_sent == 2 * (8 + 2 * 4));
  CHECK(s.sparse_bytes_received == static_cast<std::size_t>(n - 1) * 2 * (8 + 2 * 4));
  CHECK(s.dense_bytes == 2 * 4);  // the head only: the table is never densified
  for (int r = 0; r < n; ++r) CHECK(g.values(r, 0) == doctest::Approx((r + 1.0) / n).epsilon(1e-6));
  CHECK(g.values(n, 1) == doctest::Approx(10.0 * (n + 1) / 2).epsilon(1e-6));
  // The same bits as summing the parts in rank order here.
  std::vector<tg::SparseRows> parts;
  for (int r = 0; r < n; ++r) parts.push_back(part(r));
  const tg::SparseRows local = dist::merge_in_rank_order(parts, std::vector<float>(n, 1.0f / n));
  CHECK(local.rows == g.rows);
  CHECK(std::equal(local.values.begin(), local.values.end(), g.values.begin()));
}

TEST_CASE("two sparse parameters are sent together and each gets its own rows back") {
  const int n = dist::world_size(), me = dist::rank();
  // a: every rank holds row 0 and row me + 1, both of value me + 1; b: every rank row 4, of 10 (me + 1).
  tg::Tensor a = tg::zeros({6, 2}, true), b = tg::zeros({5, 3}, true);
  const float v = static_cast<float>(me + 1);
  a.accumulate_grad(tg::Grad(rows_of({0, me + 1}, {v, v, v, v}, 6, 2)));
  b.accumulate_grad(tg::Grad(rows_of({4}, {10 * v, 10 * v, 10 * v}, 5, 3)));
  dist::sync_gradients({a, b});
  REQUIRE(a.grad().is_sparse());
  std::vector<int64_t> rows{0};
  for (int r = 1; r <= n; ++r) rows.push_back(r);
  CHECK(a.grad().sparse().rows == rows);
  CHECK(a.grad().sparse().values(0, 1) == doctest::Approx((n + 1.0) / 2).epsilon(1e-6));  // the mean of 1..n
  for (int r = 1; r <= n; ++r)
    CHECK(a.grad().sparse().values(r, 0) == doctest::Approx(static_cast<double>(r) / n).epsilon(1e-6));
  REQUIRE(b.grad().is_sparse());
  CHECK(b.grad().sparse().rows == std::vector<int64_t>{4});
  CHECK(b.grad().sparse().values(0, 2) == doctest::Approx(10 * (n + 1.0) / 2).epsilon(1e-6));
}

TEST_CASE("mixed kinds: sparse on one rank and dense on another is dense; sparse or nothing stays sparse") {
  const int n = dist::world_size(), me = dist::rank();
  tg::Tensor mixed = tg::zeros({4, 2}, true);  // rank 0: row 1 of 2s (sparse); the others: all 1s (dense)
  if (me == 0)
    mixed.accumulate_grad(tg::Grad(rows_of({1}, {2, 2}, 4, 2)));
  else
    mixed = with_dense_grad({4, 2}, 1.0f);
  tg::Tensor some =
      tg::zeros({4, 2}, true);  // only the last rank holds rows (row 3 of 5s); the others nothing
  if (me == n - 1) some.accumulate_grad(tg::Grad(rows_of({3}, {5, 5}, 4, 2)));
  dist::sync_gradients({mixed, some});
  REQUIRE(mixed.grad().is_dense());
  const tg::Array g = mixed.grad_dense();
  CHECK(g(0, 0) == doctest::Approx((n - 1.0) / n).epsilon(1e-6));  // 0 from rank 0, 1 from the others
  CHECK(g(1, 1) == doctest::Approx((2.0 + n - 1.0) / n).epsilon(1e-6));
  REQUIRE(some.grad().is_sparse());
  CHECK(some.grad().sparse().rows == std::vector<int64_t>{3});
  CHECK(some.grad().sparse().values(0, 0) == doctest::Approx(5.0 / n).epsilon(1e-6));
}

TEST_CASE("N processes with batch B/N take the steps of one process with batch B, last batch uneven") {
  const Task t;
  const int n = dist::world_size();
  // 22 documents: 11 per rank on 2 ranks (batches 4, 4, 3), 8 per rank on 3 (2 padded; batches 3, 3, 2).
  const std::size_t b = n == 2 ? 4 : 3;
  const Curve many = train_distributed(t, "sgd", b, 3), one = train_alone(t, "sgd", b, 3);
  REQUIRE(many.losses.size() == one.losses.size());
  CHECK(many.local_batch_sizes.at(2) < b);  // the uneven last batch
  double worst = 0;
  for (std::size_t i = 0; i < one.losses.size(); ++i)
    worst = std::max(worst, std::abs(many.losses[i] - one.losses[i]));
  CHECK(worst < 1e-5);
  CHECK(max_diff(many.params, one.params) < 1e-5);
  CHECK(one.losses.back() < one.losses.front());  // it learns
  // Adam too (lazy on the table): within float rounding of one process.
  const Curve many_adam = train_distributed(t, "adam", b, 3), one_adam = train_alone(t, "adam", b, 3);
  CHECK(max_diff(many_adam.params, one_adam.params) < 1e-4);
}

// The Task's model with its table split across the ranks (distributed/shard.hpp):
// built whole (the same start as Model's), then this rank keeps its rows.
struct ShardedModel {
  dist::RowShard shard;
  Model whole;
  tg::nn::EmbeddingBag bag = tg::nn::EmbeddingBag::from_pretrained(
      shard.take(whole.bag.weight.value()), {.mode = tg::nn::EmbeddingBagMode::sum, .sparse = true}, false);
  std::vector<tg::Tensor> params() { return {bag.weight, whole.head.weight, *whole.head.bias}; }
  tg::Tensor loss(const Task& t, const std::vector<int64_t>& idx) {
    std::vector<std::vector<int64_t>> picked;
    for (int64_t i : idx) picked.push_back(t.docs[i]);
    const tg::CsrBatch mine =
        tg::data::to_csr(shard.documents(picked, 50), shard.rows(50), tg::data::CsrValues::counts);
    return tg::cross_entropy(whole.head(tg::tanh(dist::sum_over_ranks(bag.forward(mine)))), t.targets(idx));
  }
};

TEST_CASE("a table split by rows: each rank holds rows r, r + N, ..., and all_gather_rows puts them back") {
  const dist::RowShard shard;
  const int n = dist::world_size(), me = dist::rank();
  CHECK(shard.rank() == me);
  CHECK(shard.world() == n);
  tg::Array table = tg::Array::from_shape({7, 2});
  for (std::size_t k = 0; k < table.size(); ++k) table.data()[k] = static_cast<float>(k);
  const tg::Array mine = shard.take(table);
  REQUIRE(static_cast<int64_t>(mine.shape()[0]) == shard.rows(7));
  for (std::size_t l = 0; l < mine.shape()[0]; ++l) {
    CHECK(mine(l, 0) == table(l * n + me, 0));
    CHECK(mine(l, 1) == table(l * n + me, 1));
  }
  const std::vector<double> counts = gather(static_cast<double>(shard.rows(7)));
  double total = 0;
  for (double c : counts) total += c;
  CHECK(total == 7);
  const tg::Array back = dist::all_gather_rows(mine, 7, shard);
  CHECK(back == table);
  // A table of one row: the other ranks hold none ([0, 2]), and it still comes back whole.
  const tg::Array one_row{{5.0f, 6.0f}};
  const tg::Array part = shard.take(one_row);
  CHECK(part.shape()[0] == (me == 0 ? 1u : 0u));
  CHECK(part.shape()[1] == 2);
  CHECK(dist::all_gather_rows(part, 1, shard) == one_row);
  // Rows that do not fit the table: every rank throws, naming the rank.
  CHECK_THROWS_WITH_AS(dist::all_gather_rows(mine, 9, shard), doctest::Contains("all_gather_rows: rank"),
                       std::invalid_argument);
}

TEST_CASE("sum_over_ranks adds every rank's part in rank order and passes the gradient on unchanged") {
  const int n = dist::world_size(), me = dist::rank();
  tg::Tensor x = tg::tensor({1.0f + me, 10.0f * (me + 1), 0.5f}, {3}, true);
  tg::Tensor y = dist::sum_over_ranks(x);
  const float nf = static_cast<float>(n);
  CHECK(y.to_vector() == std::vector<float>{nf * (nf + 1) / 2, 10 * nf * (nf + 1) / 2, 0.5f * nf});
  tg::sum(y * tg::tensor({1.0f, 2.0f, 3.0f}, {3})).backward();
  CHECK(x.grad_dense() == tg::Array{1.0f, 2.0f, 3.0f});
  // Shapes that differ, even with as many values: every rank throws, naming both shapes.
  tg::Tensor wrong = tg::zeros(me == 1 ? tg::Shape{3, 2} : tg::Shape{2, 3}, true);
  const std::string what = me == 1 ? "sum_over_ranks: rank 1 passes shape [3, 2], rank 0 shape [2, 3]"
                                   : "sum_over_ranks: rank " + std::to_string(me) +
                                         " passes shape [2, 3], rank 1 shape [3, 2]";
  CHECK_THROWS_WITH_AS(dist::sum_over_ranks(wrong), what.c_str(), std::invalid_argument);
  tg::Tensor longer = tg::zeros({static_cast<std::size_t>(me + 1)}, true);
  CHECK_THROWS_WITH_AS(dist::sum_over_ranks(longer), doctest::Contains("sum_over_ranks: rank"),
                       std::invalid_argument);
}

TEST_CASE("a table split by rows trains as one process does, with no gradient exchanged") {
  const Task t;
  const std::size_t b = 8 / dist::world_size();  // global batches of about 8
  for (const std::string kind : {"sgd", "adam"}) {
    CAPTURE(kind);
    ShardedModel m;
    const Curve one = train_alone(t, kind, b, 3);
    const std::vector<double> losses = train_global_batches(m, t, kind, b, 3).losses;
    CHECK(m.params()[0].grad().is_sparse());  // the table's gradient: this rank's rows only
    REQUIRE(losses.size() == one.losses.size());
    double worst = 0;
    for (std::size_t i = 0; i < losses.size(); ++i)
      worst = std::max(worst, std::abs(losses[i] - one.losses[i]));
    CHECK(worst < 1e-5);
    const tg::Array table = dist::all_gather_rows(m.bag.weight.value(), 50, m.shard);
    CHECK(max_diff({tg::Tensor(table), m.whole.head.weight, *m.whole.head.bias}, one.params) < 1e-5);
    // Every rank ends with the same head, bit for bit: it saw the same sums.
    const std::vector<double> heads = gather(checksum({m.whole.head.weight, *m.whole.head.bias}));
    for (double h : heads) CHECK(h == heads[0]);
  }
}

TEST_CASE("lazy Adam stays lazy: rows no rank touched keep their values") {
  const Task t;
  Model initial;
  const Curve c = train_distributed(t, "adam", 3, 2);
  const auto before = initial.bag.weight.to_vector(), after = c.params[0].to_vector();
  // Ids 40..49 occur in no document: their rows (4 values each) are untouched.
  for (std::size_t k = 40 * 4; k < 50 * 4; ++k) CHECK(after[k] == before[k]);
  bool moved = false;
  for (std::size_t k = 0; k < 40 * 4; ++k) moved = moved || after[k] != before[k];
  CHECK(moved);
}

TEST_CASE("a fixed world size repeats bit for bit, and every rank holds the same bits") {
  const Task t;
  const Curve first = train_distributed(t, "adam", 2, 2), second = train_distributed(t, "adam", 2, 2);
  CHECK(checksum(first.params) == checksum(second.params));
  CHECK(max_diff(first.params, second.params) == 0.0);
  const std::vector<double> ranks = gather(checksum(first.params));
  for (double v : ranks) CHECK(v == ranks[0]);
}

TEST_CASE("ranks that pass different parameters all throw, naming what differs") {
  const int me = dist::rank();
  std::vector<tg::Tensor> params = {with_dense_grad({2}, 1.0f)};
  if (me == 0) params.push_back(with_dense_grad({2}, 1.0f));
  std::string what;
  try {
    dist::sync_gradients(params);
  } catch (const std::invalid_argument& e) {
    what = e.what();
  }
  CHECK(what.find("sync_gradients: rank " + std::to_string(me) + " passes") != std::string::npos);

  tg::Tensor p = with_dense_grad({static_cast<std::size_t>(me + 2), 3}, 1.0f);
  what.clear();
  try {
    dist::sync_gradients({p});
  } catch (const std::invalid_argument& e) {
    what = e.what();
  }
  CHECK(what.find("parameter 0 has " + std::to_string(3 * (me + 2)) + " values in " + std::to_string(me + 2) +
                  " rows on rank " + std::to_string(me)) != std::string::npos);
  CHECK_THROWS_AS(dist::sync_gradients({p}, -1), std::invalid_argument);
}

// Rank 1 throws at step `at`; the others are then waiting in sync_gradients,
// and main's handler stops them all (MPI_Abort).
int throw_at(int at) {
  const Task t;
  Model m;
  auto opt = make_opt("sgd", m.params());
  dist::DistributedSampler sampler(t.docs.size(), {.seed = 3});
  for (int epoch = 0;; ++epoch) {
    sampler.set_epoch(epoch);
    int step = 0;
    for (const std::vector<int64_t>& idx : sampler.batches(2)) {
      if (dist::rank() == 1 && ++step == at)
        throw std::runtime_error("rank 1: a deliberate failure at step " + std::to_string(at));
      tg::Tensor loss = m.loss(t, idx);
      opt->zero_grad();
      loss.backward();
      dist::sync_gradients(m.params());
      opt->step();
    }
  }
}

int main(int argc, char** argv) {
  dist::Session mpi(argc, argv);
  if (argc == 3 && std::strcmp(argv[1], "--throw-at") == 0) {
    try {
      return throw_at(std::atoi(argv[2]));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "test_mpi: %s; stopping all %d ranks\n", e.what(), mpi.world_size());
      dist::abort(3);
    }
  }
  doctest::Context context(argc, argv);
  context.setOption("no-intro", true);
  context.setOption("no-colors",
                    true);  // mpirun gives ranks a terminal: keep the summary plain for scripts/test
  if (mpi.rank() != 0) context.setOption("minimal", true);  // one report; failures still print
  int failed = context.run() != 0;
  const std::vector<double> all = gather(failed);
  double any = 0;
  for (double f : all) any += f;
  if (mpi.rank() == 0) std::printf("mpi: %d ranks, %g of them with failures\n", mpi.world_size(), any);
  return any > 0 ? 1 : 0;
}
