// Threads inside tapegrad's loops (core/kernels/parallel.hpp): the loop helper itself,
// and the promise that a result has the same bits whatever the thread count.
// Part of the `threads` suite, which CI also runs under ThreadSanitizer.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;

using tg::test::same_bits;
using tg::test::Threads;

namespace {

// Everything a run produced that must not depend on the thread count.
struct Outcome {
  std::vector<float> losses;
  std::vector<Array> params, grads;
};

// A bag-of-words model trained a few steps: EmbeddingBag (`mode`, sparse rows)
// -> tanh -> Linear, and on the side an Embedding with a dense gradient, large
// enough for the optimizer to split its rows. Big enough that every loop that
// can split does (checked by the caller through detail::split_loops()). The
// head's products are too small to split (products: the next test).
Outcome train(tg::nn::EmbeddingBagMode mode, bool adam, bool per_sample_weights) {
  tg::Generator gen(7);
  tg::nn::EmbeddingBagOptions o;
  o.mode = mode;
  o.sparse = true;
  tg::nn::EmbeddingBag bag(5000, 64, o, gen);
  tg::nn::EmbeddingOptions dense;
  dense.sparse = false;  // a dense [5000, 64] gradient
  tg::nn::Embedding side(5000, 64, dense, gen);
  tg::nn::Linear head(64, 3, true, gen);
  std::vector<Tensor> params{bag.weight, head.weight, *head.bias, side.weight};
  std::unique_ptr<tg::optim::Optimizer> opt;
  if (adam)
    opt = std::make_unique<tg::optim::Adam>(params, tg::optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01});
  else
    opt = std::make_unique<tg::optim::SGD>(params, tg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  Outcome out;
  for (int step = 0; step < 4; ++step) {
    tg::CsrBatch batch;  // indptr starts {0}; 32 documents of 40 to 160 ids, repeats included
    for (int d = 0; d < 32; ++d) {
      const int64_t len = 40 + static_cast<int64_t>(gen() % 121);
      for (int64_t k = 0; k < len; ++k) {
        batch.indices.push_back(static_cast<int64_t>(gen() % 1500) * (1 + d % 3));
        if (per_sample_weights) batch.values.push_back(static_cast<float>(gen() % 100) / 50.0f);
      }
      batch.indptr.push_back(static_cast<int64_t>(batch.indices.size()));
    }
    batch.num_cols = 5000;
    tg::Indices ids = xt::zeros<int64_t>({32});
    for (std::size_t i = 0; i < 32; ++i) ids(i) = static_cast<int64_t>(gen() % 5000);
    tg::Indices y = xt::zeros<int64_t>({32});
    for (std::size_t i = 0; i < 32; ++i) y(i) = static_cast<int64_t>(gen() % 3);
    Tensor loss = tg::cross_entropy(head(tg::tanh(bag.forward(batch) + side(ids))), y);
    opt->zero_grad();
    loss.backward();
    for (const Tensor& p : params) out.grads.push_back(p.grad().to_dense(p.shape()));
    opt->step();
    out.losses.push_back(loss.item());
  }
  for (const Tensor& p : params) out.params.push_back(p.value());
  return out;
}

void check_same(const Outcome& a, const Outcome& b) {
  CHECK(a.losses == b.losses);
  REQUIRE(a.grads.size() == b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(a.grads[i], b.grads[i]));
  }
  REQUIRE(a.params.size() == b.params.size());
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(a.params[i], b.params[i]));
  }
}

}  // namespace

TEST_SUITE("threads") {
  TEST_CASE("parallel_for covers the range once, in contiguous chunks, on several threads") {
    Threads threads(3);
    CHECK(tg::get_num_threads() == 3);
    for (std::size_t n : {0, 1, 2, 5, 99, 1000}) {
      for (std::size_t grain : {0, 1, 7, 400}) {
        CAPTURE(n);
        CAPTURE(grain);
        std::vector<std::atomic<int>> hits(n);
        std::mutex m;
        std::vector<std::pair<std::size_t, std::size_t>> chunks;
        std::set<std::thread::id> ids;
        tg::parallel_for(n, grain, [&](std::size_t lo, std::size_t hi) {
          for (std::size_t i = lo; i < hi; ++i) hits[i]++;
          std::lock_guard lock(m);
          chunks.emplace_back(lo, hi);
          ids.insert(std::this_thread::get_id());
        });
        for (std::size_t i = 0; i < n; ++i) CHECK(hits[i] == 1);
        CHECK(chunks.size() <= 3);
        CHECK(ids.size() == chunks.size());  // one chunk per thread
        for (const auto& [lo, hi] : chunks) {
          CHECK(lo < hi);
          if (chunks.size() > 1) CHECK(hi - lo >= grain);
        }
        const std::size_t most = grain == 0 ? n : n / grain;
        CHECK(chunks.size() == std::max<std::size_t>(std::min<std::size_t>(3, most), n == 0 ? 0 : 1));
      }
    }
  }

  TEST_CASE("parallel_for: an exception reaches the caller; a loop inside a loop runs on its own thread") {
    Threads threads(2);
    CHECK_THROWS_WITH_AS(tg::parallel_for(100, 1,
                                          [](std::size_t lo, std::size_t) {
                                            if (lo > 0) throw std::runtime_error("chunk from 50");
                                          }),
                         "chunk from 50", std::runtime_error);
    // The pool still works after it.
    std::atomic<std::size_t> sum{0}, inner_chunks{0};
    tg::parallel_for(100, 1, [&](std::size_t lo, std::size_t hi) {
      tg::parallel_for(10, 1, [&](std::size_t a, std::size_t b) {
        inner_chunks++;
        sum += (hi - lo) * (b - a);
      });
    });
    CHECK(sum == 1000);
    CHECK(inner_chunks == 2);  // one per outer chunk, not split again
    CHECK_THROWS_WITH_AS(tg::parallel_for(100, 1, [](std::size_t, std::size_t) { tg::set_num_threads(1); }),
                         "set_num_threads: called inside a parallel_for loop", std::logic_error);
    CHECK(tg::get_num_threads() == 2);
  }

  TEST_CASE("set_num_threads refuses 0 and keeps the count") {
    Threads threads(2);
    CHECK_THROWS_WITH_AS(tg::set_num_threads(0),
                         "set_num_threads: the number of threads must be at least 1, got 0",
                         std::invalid_argument);
    CHECK(tg::get_num_threads() == 2);
  }

  TEST_CASE("loops started from two threads at once: each finishes, one of them on its own thread") {
    Threads threads(2);
    std::atomic<std::size_t> total{0};
    auto work = [&] {
      for (int r = 0; r < 50; ++r)
        tg::parallel_for(1000, 10, [&](std::size_t lo, std::size_t hi) { total += hi - lo; });
    };
    std::thread other(work);
    work();
    other.join();
    CHECK(total == 2 * 50 * 1000);
  }

  TEST_CASE("training gives the same bits on 1, 2 and 3 threads") {
    using Mode = tg::nn::EmbeddingBagMode;
    struct Case {
      Mode mode;
      bool adam, weights;
    };
    for (const Case c : {Case{Mode::sum, true, false}, Case{Mode::sum, false, true},
                         Case{Mode::mean, true, false}, Case{Mode::max, false, false}}) {
      CAPTURE(static_cast<int>(c.mode));
      CAPTURE(c.adam);
      Outcome one, two, three;
      {
        Threads threads(1);
        one = train(c.mode, c.adam, c.weights);
      }
      const std::size_t before = tg::detail::split_loops();
      {
        Threads threads(2);
        two = train(c.mode, c.adam, c.weights);
      }
      // Each step splits the bag sums (not in max mode), the gradient rows,
      // and the optimizer's sparse and large dense rows.
      CHECK(tg::detail::split_loops() - before >= 4 * (c.mode == Mode::max ? 3 : 4));
      {
        Threads threads(3);
        three = train(c.mode, c.adam, c.weights);
      }
      check_same(one, two);
      check_same(one, three);
    }
  }

  TEST_CASE("to_csr: the same batch on 1, 2 and 3 threads") {
    tg::Generator gen(5);
    std::vector<std::vector<int64_t>> docs(100);
    for (auto& doc : docs)
      for (std::size_t k = gen() % 300; k > 0; --k) doc.push_back(static_cast<int64_t>(gen() % 500));
    for (auto values : {tg::data::CsrValues::counts, tg::data::CsrValues::binary}) {
      tg::CsrBatch one, two, three;
      {
        Threads threads(1);
        one = tg::data::to_csr(docs, 500, values);
      }
      const std::size_t before = tg::detail::split_loops();
      {
        Threads threads(2);
        two = tg::data::to_csr(docs, 500, values);
      }
      CHECK(tg::detail::split_loops() > before);
      {
        Threads threads(3);
        three = tg::data::to_csr(docs, 500, values);
      }
      for (const tg::CsrBatch* b : {&two, &three}) {
        CHECK(b->indptr == one.indptr);
        CHECK(b->indices == one.indices);
        CHECK(b->values == one.values);
      }
      CHECK(one.rows() == 100);
    }
  }

  TEST_CASE(
      "elementwise ops, sums, copies, softmax and layer_norm split across threads: the same bits on 1, 2 and "
      "3") {
    // Each element (and each sum) is computed by the same operations in the
    // same order whichever thread holds it: sums are cut into blocks by their
    // length, not by the thread count (core/kernels/).
    auto run = [] {
      tg::Generator gen(3);
      Tensor a = tg::randn({300, 1000}, gen, true), row = tg::randn({1000}, gen, true),
             col = tg::randn({300, 1}, gen, true), w = tg::randn({1000}, gen, true);
      Tensor h = tg::tanh(a * row + col);
      Tensor s =
          tg::softmax(h, -1) + tg::log_softmax(h, 0) + tg::exp(tg::layer_norm(h, {1000}, w, std::nullopt));
      Tensor loss = tg::sum(s) + tg::mean(tg::sum(tg::sigmoid(s), 0)) + tg::mse_loss(tg::relu(s), h);
      loss = loss + tg::sum(tg::transpose(s, 0, 1) * 0.5f);
      // Copies: add's second input, reshape, tril forward and backward.
      Tensor c = tg::randn({300, 1000}, gen, true);
      loss = loss + tg::sum(tg::tril(tg::reshape(s + c, {1000, 300})));
      loss.backward();
      return std::vector<Array>{s.value(),          loss.value(),     a.grad().dense(), row.grad().dense(),
                                col.grad().dense(), w.grad().dense(), c.grad().dense()};
    };
    std::vector<Array> one;
    {
      Threads threads(1);
      one = run();
    }
    for (std::size_t n : {2, 3}) {
      CAPTURE(n);
      Threads threads(n);
      const std::size_t before = tg::detail::split_loops();
      const std::vector<Array> many = run();
      CHECK(tg::detail::split_loops() > before);
      for (std::size_t i = 0; i < one.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(many[i], one[i]));
      }
    }
  }

  TEST_CASE(
      "matrix products split by rows: the same bits run to run on a thread count, close across counts") {
    // Each block of rows is one BLAS call, whose kernels may round a block's
    // edge rows differently from the same rows inside a larger call: the
    // bits are promised for one thread count, not across counts. Across
    // counts each element is held to the bound any order of summation meets:
    // a k-term dot product computed in float is within k u sum_i |a_i b_i| of
    // the exact one (u = 2^-24; with a fused multiply-add too), so two of them
    // differ by at most twice that (product_close in helpers.hpp).
    struct Shapes {
      std::size_t rows, in, out;
    };
    for (const Shapes sh :
         {Shapes{32, 3000, 64}, Shapes{37, 129, 65}, Shapes{512, 64, 192}, Shapes{3, 5000, 7}}) {
      CAPTURE(sh.rows);
      CAPTURE(sh.in);
      const std::size_t batch = 4;
      tg::Generator gen(11);
      const Array x = tg::randn({sh.rows, sh.in}, gen).value(), w = tg::randn({sh.out, sh.in}, gen).value(),
                  bias = tg::randn({sh.out}, gen).value(), gy = tg::randn({sh.rows, sh.out}, gen).value();
      const Array a = tg::randn({batch, sh.rows, sh.in}, gen).value(),
                  b = tg::randn({batch, sh.in, sh.out}, gen).value(),
                  gz = tg::randn({batch, sh.rows, sh.out}, gen).value();
      auto products = [&] {  // linear and batched matmul, forward and backward from fixed gradients
        Tensor tx(x, true), tw(w, true), tbias(bias, true), ta(a, true), tb(b, true);
        Tensor y = tg::linear(tx, tw, tbias), z = tg::matmul(ta, tb);
        y.backward(gy);
        z.backward(gz);
        return std::vector<Array>{y.value(), tx.grad().dense(), tw.grad().dense(), tbias.grad().dense(),
                                  z.value(), ta.grad().dense(), tb.grad().dense()};
      };
      // What bounds each result's rounding: sum |a_i b_i| over its k terms.
      using tg::test::abs_product;
      const Array ones = xt::ones<float>({sh.rows, std::size_t{1}});
      const std::vector<tg::test::Bound> bounds = {
          abs_product(x, w, false, true, sh.in, tg::test::abs_values(bias)),  // y = x W^T + b
          abs_product(gy, w, false, false, sh.out),                           // dx = gy W
          abs_product(gy, x, true, false, sh.rows),                           // dW = gy^T x
          abs_product(ones, gy, true, false, sh.rows),                        // db = 1^T gy
          abs_product(a, b, false, false, sh.in, {}, batch),                  // z = a b
          abs_product(gz, b, false, true, sh.out, {}, batch),                 // da = gz b^T
          abs_product(a, gz, true, false, sh.rows, {}, batch),                // db = a^T gz
      };
      std::vector<Array> one;
      {
        Threads threads(1);
        one = products();
      }
      for (std::size_t n : {2, 3}) {
        CAPTURE(n);
        Threads threads(n);
        const std::size_t before = tg::detail::split_loops();
        const std::vector<Array> first = products(), second = products();
        CHECK(tg::detail::split_loops() > before);
        for (std::size_t i = 0; i < one.size(); ++i) {
          CAPTURE(i);
          CHECK(same_bits(first[i], second[i]));
          CHECK_PRODUCT_CLOSE(first[i], one[i], bounds[i]);
        }
      }
    }
  }

  TEST_CASE(
      "matmul backward over a broadcast batch: the matrices split, the same bits run to run, close across "
      "counts") {
    // a's 6 matrices are each read by 5 products; each gets the sum of their
    // gradients, added in product order whichever thread holds it. Across
    // thread counts each element is held to the rounding bound of its sum
    // (tg::test::Bound): a's over the 5 products' 40 terms, b's over a's 32 rows.
    tg::Generator gen(5);
    const Array av = tg::randn({6, 1, 32, 48}, gen).value(), bv = tg::randn({6, 5, 48, 40}, gen).value(),
                gz = tg::randn({6, 5, 32, 40}, gen).value();
    auto grads = [&] {
      Tensor a(av, true), b(bv, true);
      tg::matmul(a, b).backward(gz);
      return std::vector<Array>{a.grad().dense(), b.grad().dense()};
    };
    tg::test::Bound da{std::vector<double>(6 * 32 * 48, 0.0), 5 * 40};  // da[i] = sum_j gz[i, j] b[i, j]^T
    tg::test::Bound db{std::vector<double>(6 * 5 * 48 * 40, 0.0), 32};  // db[i, j] = a[i]^T gz[i, j]
    auto mag = [](const Array& x, std::size_t at) { return std::abs(static_cast<double>(x.data()[at])); };
    for (std::size_t i = 0; i < 6; ++i)
      for (std::size_t j = 0; j < 5; ++j)
        for (std::size_t r = 0; r < 32; ++r)
          for (std::size_t c = 0; c < 48; ++c)
            for (std::size_t t = 0; t < 40; ++t) {
              const std::size_t g_at = ((i * 5 + j) * 32 + r) * 40 + t;
              da.magnitude[(i * 32 + r) * 48 + c] += mag(gz, g_at) * mag(bv, ((i * 5 + j) * 48 + c) * 40 + t);
              db.magnitude[((i * 5 + j) * 48 + c) * 40 + t] += mag(av, (i * 32 + r) * 48 + c) * mag(gz, g_at);
            }
    std::vector<Array> one;
    {
      Threads threads(1);
      one = grads();
    }
    for (std::size_t n : {2, 3}) {
      CAPTURE(n);
      Threads threads(n);
      const std::size_t before = tg::detail::split_loops();
      const std::vector<Array> first = grads(), second = grads();
      CHECK(tg::detail::split_loops() > before);
      for (std::size_t i = 0; i < one.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(first[i], second[i]));
        CHECK_PRODUCT_CLOSE(first[i], one[i], i == 0 ? da : db);
      }
    }
  }

  TEST_CASE("conv2d splits its images across threads: the same bits run to run, close across counts") {
    // Each chunk of images sums its own weight and bias gradients; the chunks'
    // sums are added in image order. Across thread counts each element is held
    // to the rounding bound of its sum (tg::test::Bound), from the im2col
    // columns (tg::unfold) of x: y = W cols + b over 4 * 9 terms and the bias;
    // dW = gy cols^T and db = gy 1 over 12 images' 100 positions; dx = fold(W^T
    // gy), at most 9 window positions of 6 channels, its magnitudes folded by
    // unfold's own backward.
    const std::size_t n_img = 12, c_in = 4, c_out = 6, ck = c_in * 9, l_pos = 100;
    tg::Generator gen(9);
    tg::nn::Conv2d conv(4, 6, 3, {.padding = 1}, gen);
    const Array xv = tg::randn({n_img, c_in, 10, 10}, gen).value(),
                gy = tg::randn({n_img, c_out, 10, 10}, gen).value();
    auto run = [&] {
      conv.zero_grad();
      Tensor x(xv, true);
      Tensor y = conv(x);
      y.backward(gy);
      return std::vector<Array>{y.value(), x.grad().dense(), conv.weight.grad().dense(),
                                conv.bias->grad().dense()};
    };
    const Array cols = tg::unfold(Tensor(xv), 3, {.padding = 1}).value();  // [12, 36, 100]
    const Array& w = conv.weight.value();                                  // [6, 4, 3, 3]: [6, 36]
    const Array& bias = conv.bias->value();
    auto mag = [](const Array& a, std::size_t at) { return std::abs(static_cast<double>(a.data()[at])); };
    tg::test::Bound y_bound{std::vector<double>(n_img * c_out * l_pos, 0.0), ck + 1};
    tg::test::Bound dw_bound{std::vector<double>(c_out * ck, 0.0), n_img * l_pos};
    tg::test::Bound db_bound{std::vector<double>(c_out, 0.0), n_img * l_pos};
    Array dcols = xt::zeros<float>({n_img, ck, l_pos});  // sum_o |W[o, k]| |gy[n, o, l]|
    for (std::size_t n = 0; n < n_img; ++n)
      for (std::size_t o = 0; o < c_out; ++o)
        for (std::size_t l = 0; l < l_pos; ++l) {
          const std::size_t y_at = (n * c_out + o) * l_pos + l;
          y_bound.magnitude[y_at] += mag(bias, o);
          db_bound.magnitude[o] += mag(gy, y_at);
          for (std::size_t k = 0; k < ck; ++k) {
            const std::size_t col_at = (n * ck + k) * l_pos + l;
            y_bound.magnitude[y_at] += mag(w, o * ck + k) * mag(cols, col_at);
            dw_bound.magnitude[o * ck + k] += mag(gy, y_at) * mag(cols, col_at);
            dcols.data()[col_at] += static_cast<float>(mag(w, o * ck + k) * mag(gy, y_at));
          }
        }
    Tensor folded(xt::zeros<float>({n_img, c_in, std::size_t{10}, std::size_t{10}}), true);
    tg::unfold(folded, 3, {.padding = 1}).backward(dcols);
    const Array& dx_mag = folded.grad().dense();
    tg::test::Bound dx_bound{std::vector<double>(dx_mag.begin(), dx_mag.end()), 9 * c_out};
    const std::vector<tg::test::Bound> bounds = {y_bound, dx_bound, dw_bound, db_bound};
    std::vector<Array> one;
    {
      Threads threads(1);
      one = run();
    }
    for (std::size_t n : {2, 3}) {
      CAPTURE(n);
      Threads threads(n);
      const std::size_t before = tg::detail::split_loops();
      const std::vector<Array> first = run(), second = run();
      CHECK(tg::detail::split_loops() > before);
      for (std::size_t i = 0; i < one.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(first[i], second[i]));
        CHECK_PRODUCT_CLOSE(first[i], one[i], bounds[i]);
      }
    }
  }
}
