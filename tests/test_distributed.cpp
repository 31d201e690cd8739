// distributed/ without launching processes: DistributedSampler's shares, the rank-order merge of
// sparse rows, RowShard's split of a table for any rank and world, and the world of one
// process a program sees before init (or without MPI).
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/distributed/distributed.hpp>
#include <tapegrad/distributed/sampler.hpp>
#include <tapegrad/distributed/shard.hpp>
#include <tapegrad/tapegrad.hpp>

namespace dist = tg::distributed;

namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

tg::SparseRows rows_of(std::vector<int64_t> rows, std::vector<float> values, std::size_t num_rows) {
  const std::size_t cols = rows.empty() ? 2 : values.size() / rows.size();
  tg::SparseRows s{std::move(rows), xt::xtensor<float, 2>::from_shape({values.size() / cols, cols}),
                   num_rows};
  std::copy(values.begin(), values.end(), s.values.data());
  return s;
}

}  // namespace

TEST_SUITE("distributed") {
  TEST_CASE("before init (and without MPI) a program is rank 0 of a world of 1") {
    CHECK(dist::rank() == 0);
    CHECK(dist::world_size() == 1);
    CHECK_FALSE(dist::is_initialized());
  }

  TEST_CASE(
      "DistributedSampler pads as PyTorch does: 10 positions on 3 ranks are 4 each, 2 of them repeated") {
    std::vector<std::vector<int64_t>> shares;
    for (int r = 0; r < 3; ++r) {
      dist::DistributedSampler s(10, {.shuffle = false, .num_replicas = 3, .rank = r});
      CHECK(s.num_samples() == 4);
      CHECK(s.total_size() == 12);
      shares.push_back(s.indices());
    }
    // torch DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False): every third position,
    // padded with 0, 1.
    CHECK(shares[0] == std::vector<int64_t>{0, 3, 6, 9});
    CHECK(shares[1] == std::vector<int64_t>{1, 4, 7, 0});
    CHECK(shares[2] == std::vector<int64_t>{2, 5, 8, 1});
  }

  TEST_CASE("DistributedSampler with drop_last cuts the tail instead: 10 positions on 3 ranks are 3 each") {
    std::set<int64_t> seen;
    for (int r = 0; r < 3; ++r) {
      dist::DistributedSampler s(10, {.shuffle = false, .drop_last = true, .num_replicas = 3, .rank = r});
      CHECK(s.num_samples() == 3);
      for (int64_t i : s.indices()) CHECK(seen.insert(i).second);  // no position twice
    }
    CHECK(seen == std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  }

  TEST_CASE(
      "DistributedSampler shuffles by seed + epoch, the same on every rank; the ranks' batches make the "
      "global ones") {
    const std::vector<int64_t> positions = {10, 11, 12, 13, 14, 15,
                                            16, 17, 18, 19, 20};  // a split's train part
    dist::DistributedSampler a(positions, {.seed = 5, .num_replicas = 2, .rank = 0});
    dist::DistributedSampler b(positions, {.seed = 5, .num_replicas = 2, .rank = 1});
    a.set_epoch(1);
    b.set_epoch(1);
    const std::vector<int64_t> order = a.global_order();
    CHECK(order == b.global_order());
    CHECK(order.size() == 12);
    CHECK(std::set<int64_t>(order.begin(), order.end()) ==
          std::set<int64_t>(positions.begin(), positions.end()));
    // Batch k of rank 0 and of rank 1 together are the positions [4k, 4k + 4) of the global order.
    const auto ba = a.batches(2), bb = b.batches(2);
    REQUIRE(ba.size() == 3);
    REQUIRE(bb.size() == 3);
    for (std::size_t k = 0; k < 3; ++k) {
      std::multiset<int64_t> mine(ba[k].begin(), ba[k].end());
      mine.insert(bb[k].begin(), bb[k].end());
      CHECK(mine == std::multiset<int64_t>(order.begin() + 4 * k, order.begin() + 4 * k + 4));
    }
    a.set_epoch(2);
    CHECK(a.global_order() != order);  // a new epoch, a new order
    a.set_epoch(1);
    CHECK(a.global_order() == order);  // and the same epoch, the same order
    // Batches of 5 of 6 positions: 5, then an uneven last 1.
    CHECK(a.batches(5).size() == 2);
    CHECK(a.batches(5).back().size() == 1);
  }

  TEST_CASE("DistributedSampler rejects bad settings, naming them") {
    CHECK(message_of([] { dist::DistributedSampler(10, {.num_replicas = 0, .rank = 0}); }) ==
          "DistributedSampler(10 positions, num_replicas 0, rank 0): num_replicas must be at least 1");
    CHECK(message_of([] { dist::DistributedSampler(10, {.num_replicas = 2, .rank = 2}); }) ==
          "DistributedSampler(10 positions, num_replicas 2, rank 2): rank must be in [0, num_replicas)");
    CHECK(message_of([] {
            dist::DistributedSampler(0, {.num_replicas = 1, .rank = 0});
          }).find("no positions") != std::string::npos);
    CHECK(message_of([] {
            dist::DistributedSampler(2, {.drop_last = true, .num_replicas = 3, .rank = 0});
          }).find("drop_last leaves no position") != std::string::npos);
    CHECK(message_of([] { dist::DistributedSampler(4, {.num_replicas = 1, .rank = 0}).batches(0); }) ==
          "DistributedSampler::batches: batch_size must be at least 1, got 0");
  }

  TEST_CASE(
      "merge_in_rank_order: the union of the rows, shared ones summed rank 0 first, each part weighted") {
    const tg::SparseRows r0 = rows_of({1, 4}, {1, 2, 3, 4}, 6), r1 = rows_of({0, 4}, {10, 20, 30, 40}, 6);
    const tg::SparseRows m = dist::merge_in_rank_order({r0, r1}, {0.5f, 0.5f});
    CHECK(m.num_rows == 6);
    CHECK(m.rows == std::vector<int64_t>{0, 1, 4});
    CHECK(std::vector<float>(m.values.begin(), m.values.end()) ==
          std::vector<float>{5, 10, 0.5f, 1, 16.5f, 22});
    // Rank order fixes the bits: 1e8 + 1 - 1e8 is 0 in float32, 1e8 - 1e8 + 1 is 1.
    const tg::SparseRows a = rows_of({2}, {1e8f, 1e8f}, 6), b = rows_of({2}, {1, 1}, 6),
                         c = rows_of({2}, {-1e8f, -1e8f}, 6);
    CHECK(dist::merge_in_rank_order({a, b, c}, {1, 1, 1}).values(0, 0) == 0.0f);
    CHECK(dist::merge_in_rank_order({a, c, b}, {1, 1, 1}).values(0, 0) == 1.0f);
    // A rank without rows adds nothing.
    const tg::SparseRows none = rows_of({}, {}, 6);
    CHECK(dist::merge_in_rank_order({none, r1}, {1, 1}).rows == r1.rows);
    CHECK(message_of([&] {
            dist::merge_in_rank_order({r0, rows_of({1}, {1, 2}, 7)}, {1, 1});
          }) == "merge_in_rank_order: rank 1's rows are of a [7, 2] table, rank 0's of a [6, 2] one");
    CHECK(message_of([&] {
            dist::merge_in_rank_order({r0}, {1, 1});
          }) == "merge_in_rank_order: 1 parts and 2 weights (one per rank, at least one)");
    // Each part must be coalesced (the merge walks sorted lists): refused, not misread.
    CHECK(message_of([&] {
            dist::merge_in_rank_order({r0, rows_of({4, 1}, {1, 2, 3, 4}, 6)}, {1, 1});
          }) == "merge_in_rank_order: rank 1's rows: SparseRows rows are not sorted and unique (4 before 1)");
    CHECK(message_of([&] {
            dist::merge_in_rank_order({rows_of({6}, {1, 2}, 6), r1}, {1, 1});
          }) == "merge_in_rank_order: rank 0's rows: SparseRows row 6 out of range for 6 rows");
  }

  TEST_CASE("RowShard: rank r of N holds rows r, r + N, ...; documents keep its ids, as local rows") {
    const int64_t num_rows = 10;
    int64_t total = 0;
    for (int r = 0; r < 3; ++r) {
      const dist::RowShard s(r, 3);
      total += s.rows(num_rows);
      for (int64_t l = 0; l < s.rows(num_rows); ++l) {
        CHECK(s.owns(s.global(l)));
        CHECK(s.local(s.global(l)) == l);
        CHECK(s.global(l) < num_rows);
      }
    }
    CHECK(total == num_rows);
    CHECK(dist::RowShard(0, 3).rows(10) == 4);
    CHECK(dist::RowShard(2, 3).rows(10) == 3);
    CHECK(dist::RowShard(1, 4).rows(0) == 0);

    const dist::RowShard one(1, 3);
    CHECK(one.documents({{0, 1, 4, 4, 9}, {}, {2, 7}}, 10) ==
          std::vector<std::vector<int64_t>>{{0, 1, 1}, {}, {2}});
    tg::Array table = tg::Array::from_shape({5, 2});
    for (std::size_t k = 0; k < table.size(); ++k) table.data()[k] = static_cast<float>(k);
    CHECK(one.take(table) == tg::Array{{2, 3}, {8, 9}});  // rows 1 and 4

    CHECK(message_of([] { dist::RowShard(3, 3); }) == "RowShard: rank 3 of a world of 3");
    CHECK(message_of([] { dist::RowShard(0, 0); }) == "RowShard: rank 0 of a world of 0");
    CHECK(message_of([&] {
            one.documents({{1}, {2, -5}}, 10);
          }) == "RowShard::documents: document 1, position 1: id -5 outside [0, 10)");
    CHECK(message_of([&] { one.documents({{10}}, 10); }) ==
          "RowShard::documents: document 0, position 0: id 10 outside [0, 10)");
    CHECK(message_of([&] { one.rows(-1); }) == "RowShard::rows: num_rows -1");
    CHECK(message_of([&] { one.take(tg::Array(1.0f)); }) ==
          "RowShard::take: a table of shape [] has no rows");
  }

  TEST_CASE("a world of one: sum_over_ranks is x with its gradient, all_gather_rows the rows themselves") {
    if (dist::is_available())
      return;  // a build with MPI wants init() first (tests/mpi/test_mpi.cpp runs these)
    tg::Tensor x = tg::tensor({1.0f, -2.0f}, {2}, true);
    tg::Tensor y = dist::sum_over_ranks(x);
    CHECK(y.to_vector() == x.to_vector());
    // Its local rule (inspect/rules.cpp), worked out at the step, gives the closure's gradient.
    std::size_t worked = 0;
    tg::debug::StepObserverGuard observe(
        [&](const tg::Node& n, const tg::Array& grad, const tg::Grads& grads) {
          if (n.op != "sum_over_ranks") return;
          CHECK(tg::local_rule(n.op) == "x.grad += grad   (the sum over the ranks adds x once)");
          for (const tg::debug::Worked& w : tg::debug::worked(n, grad, grads, 0, 10)) {
            CHECK(w.value.at(0) == grads[0].dense().data()[w.element]);
            ++worked;
          }
        });
    tg::sum(y * tg::tensor({3.0f, 4.0f}, {2})).backward();
    CHECK(worked == 2);
    CHECK(x.grad_dense() == tg::Array{3.0f, 4.0f});
    const tg::Array rows{{1, 2}, {3, 4}};
    CHECK(dist::all_gather_rows(rows, 2, dist::RowShard()) == rows);
    CHECK(message_of([&] { dist::all_gather_rows(rows, 3, dist::RowShard()); }) ==
          "all_gather_rows: rank 0 holds 4 values where 6 (its rows of 3 times 2) were expected");
  }
}
