// The ops of a first CNN, binary classifier or recurrent model: conv1d, conv2d,
// unfold, max/avg/adaptive pooling, softplus, log_sigmoid, logsumexp, the
// binary cross-entropies and batch_norm. Values and gradients against PyTorch
// 1.13 (tests/data/layers_reference.json, from tests/tools/gen_layers_reference.py),
// gradients against finite differences, and the error each gives for a bad
// shape or size, with nothing changed.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;
using Inputs = std::vector<Tensor>;
using nlohmann::json;
using tg::test::check_grad;
using tg::test::to_array;

namespace {

const json& op_case(const std::string& name) {
  return tg::test::reference_case("layers_reference", name);
}

// fn on the case's inputs against PyTorch's output and the gradients of
// sum(out * w). Inputs whose gradient PyTorch does not give (weights of a
// loss) are passed without requires_grad.
void check_parity(const std::string& name, const std::function<Tensor(const Inputs&, const json&)>& fn,
                  double rtol = 1e-5, double atol = 1e-6) {
  CAPTURE(name);
  const json& c = op_case(name);
  Inputs in;
  for (std::size_t i = 0; i < c.at("inputs").size(); ++i)
    in.push_back(Tensor(to_array(c["inputs"][i]), !c.at("grads")[i].is_null()));
  Tensor out = fn(in, c);
  CHECK_ALLCLOSE(out.value(), to_array(c.at("out")), rtol, atol);
  out.backward(to_array(c.at("w")));
  for (std::size_t i = 0; i < in.size(); ++i)
    if (!c["grads"][i].is_null()) CHECK_ALLCLOSE(in[i].grad_dense(), to_array(c["grads"][i]), rtol, atol);
}

// A size the generator wrote as a number or [h, w].
tg::Size2 size2(const json& j) {
  if (j.is_array()) return {j[0].get<int64_t>(), j[1].get<int64_t>()};
  return j.get<int64_t>();
}
std::optional<tg::Size2> maybe_size2(const json& j) {
  if (j.is_null()) return std::nullopt;
  return size2(j);
}
std::optional<Tensor> bias_of(const Inputs& x) {
  return x.size() > 2 ? std::optional<Tensor>(x[2]) : std::nullopt;
}
tg::Reduction reduction_of(const json& c) {
  const std::string r = c.at("reduction");
  return r == "mean" ? tg::Reduction::mean : r == "sum" ? tg::Reduction::sum : tg::Reduction::none;
}

tg::Generator gen(31);
Tensor rnd(const tg::Shape& shape, float scale = 1.0f) {
  Tensor t = tg::randn(shape, gen, true);
  for (float& x : t.value_mut()) x *= scale;
  return t;
}

// The exception fn throws, as text ("" when it throws none).
template <class F>
std::string message_of(F fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

constexpr float inf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_SUITE("core.nn_ops") {
  TEST_CASE("PyTorch parity: conv2d with strides, padding, dilation, groups, batch 1, no batch, 1x1 kernels") {
    for (const char* name :
         {"conv2d_plain", "conv2d_stride2_pad1", "conv2d_mixed", "conv2d_groups2", "conv2d_depthwise",
          "conv2d_batch1_odd_nobias", "conv2d_pointwise", "conv2d_pointwise_stride2", "conv2d_unbatched",
          "conv2d_stride3_dilation2", "conv2d_kernel_is_input"})
      check_parity(
          name,
          [](const Inputs& x, const json& c) {
            return tg::conv2d(x[0], x[1], bias_of(x),
                              {.stride = size2(c["stride"]), .padding = size2(c["padding"]),
                               .dilation = size2(c["dilation"]), .groups = c["groups"].get<int64_t>()});
          },
          1e-5, 2e-5);  // sums of up to 54 products of N(0, 1) numbers
  }

  TEST_CASE("PyTorch parity: conv1d") {
    for (const char* name : {"conv1d_stride2_pad1", "conv1d_dilation2_groups3", "conv1d_unbatched_nobias"})
      check_parity(name, [](const Inputs& x, const json& c) {
        return tg::conv1d(x[0], x[1], bias_of(x),
                          {.stride = c["stride"], .padding = c["padding"], .dilation = c["dilation"],
                           .groups = c["groups"]});
      });
  }

  TEST_CASE("PyTorch parity: unfold (im2col), batched and not") {
    for (const char* name : {"unfold_mixed", "unfold_unbatched"})
      check_parity(name, [](const Inputs& x, const json& c) {
        return tg::unfold(x[0], size2(c["kernel_size"]),
                          {.dilation = size2(c["dilation"]), .padding = size2(c["padding"]), .stride = size2(c["stride"])});
      });
  }

  TEST_CASE("unfold on paper: the 2x2 windows of a 3x3 image are the columns") {
    Tensor x(Array{{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}});  // [C = 1, 3, 3]
    Tensor cols = tg::unfold(x, 2);                      // [1 * 2 * 2, 2 * 2]
    CHECK(cols.shape() == tg::Shape{4, 4});
    // column 0 is the top-left window (1, 2, 4, 5), column 3 the bottom-right one (5, 6, 8, 9)
    CHECK(cols.to_vector() == std::vector<float>{1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9});
  }

  TEST_CASE("conv2d is unfold followed by a product with the weight as a matrix") {
    Tensor x = rnd({2, 3, 6, 5}), w = rnd({4, 3, 3, 2});
    Tensor direct = tg::conv2d(x, w, std::nullopt, {.stride = {2, 1}, .padding = 1});
    // [O, C kh kw] x [N, C kh kw, L] -> [N, O, L]
    Tensor cols = tg::unfold(x, {3, 2}, {.padding = 1, .stride = {2, 1}});
    Tensor via = tg::matmul(tg::reshape(w, {1, 4, 18}), cols);
    CHECK_ALLCLOSE(direct.value(), tg::reshape(via, {2, 4, 3, 6}).value(), 1e-5, 1e-5);
  }

  TEST_CASE("conv2d's patches and their gradient are the definition's, exactly, on every path of unfolding") {
    // A weight of ones that picks patch row r into output channel r: conv2d(x, w)
    // is then unfold(x) and its input gradient the patches' gradient folded
    // back, bit for bit (each sum is one value plus zeros). Windows of stride 1
    // over an input as wide as the output are copied a plane at a time
    // (core/ops/conv.cpp); the others row by row.
    struct Case {
      tg::Shape x;
      tg::Size2 k, p, d, s;
    };
    for (const Case& c : {Case{{2, 3, 5, 4}, 3, 1, 1, 1}, Case{{1, 2, 6, 7}, {3, 5}, {1, 2}, 1, 1},
                          Case{{2, 2, 4, 5}, 3, 2, 2, 1}, Case{{1, 1, 1, 6}, 3, 1, 1, 1},  // taps of padding only
                          Case{{1, 2, 3, 3}, {1, 3}, {0, 1}, 1, 1}, Case{{2, 2, 5, 5}, 3, 0, 1, 1},
                          Case{{1, 2, 6, 5}, 3, 1, 1, {2, 1}}, Case{{1, 1, 4, 4}, 2, 1, 1, 1}}) {
      const std::size_t n = c.x[0], ch = c.x[1], h = c.x[2], w = c.x[3];
      const auto kh = static_cast<std::size_t>(c.k.h), kw = static_cast<std::size_t>(c.k.w);
      const std::size_t rows = ch * kh * kw;
      Tensor x = rnd(c.x);
      Array pick = xt::zeros<float>({rows, ch, kh, kw});
      for (std::size_t r = 0; r < rows; ++r) pick(r, r / (kh * kw), r / kw % kh, r % kw) = 1.0f;
      Tensor y = tg::conv2d(x, Tensor(pick), std::nullopt, {.stride = c.s, .padding = c.p, .dilation = c.d});
      const std::size_t oh = y.shape()[2], ow = y.shape()[3];
      CAPTURE(tg::shape_str(c.x));
      CAPTURE(tg::shape_str(y.shape()));
      // The input pixel under output (yo, xo) for tap (i, j), if it is not padding.
      auto pixel = [&](std::size_t i, std::size_t j, std::size_t yo, std::size_t xo, std::size_t& iy, std::size_t& ix) {
        const int64_t sy = static_cast<int64_t>(yo) * c.s.h + static_cast<int64_t>(i) * c.d.h - c.p.h;
        const int64_t sx = static_cast<int64_t>(xo) * c.s.w + static_cast<int64_t>(j) * c.d.w - c.p.w;
        iy = static_cast<std::size_t>(sy), ix = static_cast<std::size_t>(sx);
        return sy >= 0 && sx >= 0 && iy < h && ix < w;
      };
      Array cols = xt::zeros<float>({n, rows, oh, ow});
      const Array g = tg::randn({n, rows, oh, ow}, gen).value();
      Array gx = xt::zeros<float>(c.x);
      for (std::size_t b = 0; b < n; ++b)
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t yo = 0; yo < oh; ++yo)
            for (std::size_t xo = 0; xo < ow; ++xo)
              if (std::size_t iy, ix; pixel(r / kw % kh, r % kw, yo, xo, iy, ix)) {
                cols(b, r, yo, xo) = x.value()(b, r / (kh * kw), iy, ix);
                gx(b, r / (kh * kw), iy, ix) += g(b, r, yo, xo);
              }
      CHECK(y.to_vector() == Tensor(cols).to_vector());
      y.backward(g);
      CHECK(x.grad_dense() == gx);
    }
  }

  TEST_CASE("PyTorch parity: max_pool1d/2d with padding, dilation, ceil_mode and ties") {
    for (const char* shape : {"k2", "k3_s2_p1", "mixed_ceil", "ceil_s2", "unbatched"})
      for (const char* values : {"randn", "ties"})
        check_parity(std::string("max_pool2d_") + shape + "_" + values, [](const Inputs& x, const json& c) {
          return tg::max_pool2d(x[0], size2(c["kernel_size"]),
                                {.stride = maybe_size2(c["stride"]), .padding = size2(c["padding"]),
                                 .dilation = size2(c["dilation"]), .ceil_mode = c["ceil_mode"]});
        });
    for (const char* name : {"max_pool1d_k3_s2_p1_ceil", "max_pool1d_dilation2"})
      check_parity(name, [](const Inputs& x, const json& c) {
        return tg::max_pool1d(x[0], c["kernel_size"],
                              {.stride = c["stride"].get<int64_t>(), .padding = c["padding"],
                               .dilation = c["dilation"], .ceil_mode = c["ceil_mode"]});
      });
  }

  TEST_CASE("PyTorch parity: avg_pool1d/2d with and without the padding counted, ceil_mode, divisor_override") {
    for (const char* name : {"avg_pool2d_k2", "avg_pool2d_k3_s2_p1", "avg_pool2d_k3_s2_p1_nopad", "avg_pool2d_ceil",
                             "avg_pool2d_ceil_nopad", "avg_pool2d_divisor", "avg_pool2d_unbatched"})
      check_parity(name, [](const Inputs& x, const json& c) {
        std::optional<int64_t> divisor;
        if (!c["divisor_override"].is_null()) divisor = c["divisor_override"].get<int64_t>();
        return tg::avg_pool2d(x[0], size2(c["kernel_size"]),
                              {.stride = maybe_size2(c["stride"]), .padding = size2(c["padding"]),
                               .ceil_mode = c["ceil_mode"], .count_include_pad = c["count_include_pad"],
                               .divisor_override = divisor});
      });
    check_parity("avg_pool1d_k3_s2_p1", [](const Inputs& x, const json& c) {
      return tg::avg_pool1d(x[0], c["kernel_size"],
                            {.stride = c["stride"].get<int64_t>(), .padding = c["padding"], .ceil_mode = c["ceil_mode"],
                             .count_include_pad = c["count_include_pad"]});
    });
  }

  TEST_CASE("PyTorch parity: adaptive_avg_pool1d/2d, smaller, global and larger outputs") {
    for (const char* name : {"adaptive_avg_pool2d_3x2", "adaptive_avg_pool2d_global", "adaptive_avg_pool2d_larger",
                             "adaptive_avg_pool2d_unbatched"})
      check_parity(name, [](const Inputs& x, const json& c) { return tg::adaptive_avg_pool2d(x[0], size2(c["output_size"])); });
    check_parity("adaptive_avg_pool1d_4", [](const Inputs& x, const json& c) {
      return tg::adaptive_avg_pool1d(x[0], c["output_size"].get<int64_t>());
    });
  }

  TEST_CASE("pooling on paper: max takes the first of a tie, avg divides by the window with or without padding") {
    Tensor x(Array{{{1, 3, 3, 0}, {2, 0, 1, 1}}}, true);  // [1, 2, 4]
    Tensor m = tg::max_pool1d(x, 2);                         // windows {1, 3} {3, 0} / {2, 0} {1, 1}
    CHECK(m.to_vector() == std::vector<float>{3, 3, 2, 1});
    tg::sum(m).backward();
    // the 3s are maxima of different windows; in {1, 1} the first 1 wins
    CHECK(x.grad_dense() == Array{{{0, 1, 1, 0}, {1, 0, 1, 0}}});
    Tensor a = tg::avg_pool1d(x, 3, {.stride = 2, .padding = 1});  // windows [-1, 2) [1, 4)
    CHECK(a.to_vector() == std::vector<float>{4.0f / 3, 2, 2.0f / 3, 2.0f / 3});
    Tensor b = tg::avg_pool1d(x, 3, {.stride = 2, .padding = 1, .count_include_pad = false});
    CHECK(b.to_vector() == std::vector<float>{2, 2, 1, 2.0f / 3});
  }

  TEST_CASE("max pooling: a NaN wins its window and takes the gradient; a window of padding alone gives -inf") {
    Tensor x(Array{{{1, NAN, 5, 2}}}, true);
    Tensor m = tg::max_pool1d(x, 2);
    CHECK(std::isnan(m.value()(0, 0, 0)));
    CHECK(m.value()(0, 0, 1) == 5);
    tg::sum(m).backward();
    CHECK(x.grad_dense() == Array{{{0, 1, 1, 0}}});
    // kernel 2 with dilation 3 and padding 1 over 2 values: taps -1 and 2, both outside
    Tensor y(Array{{{1, 2}}}, true);
    Tensor e = tg::max_pool1d(y, 2, {.stride = 1, .padding = 1, .dilation = 3});
    CHECK(e.to_vector() == std::vector<float>{-inf});
    tg::sum(e).backward();
    CHECK(y.grad_dense() == Array{{{0, 0}}});
  }

  TEST_CASE("gradcheck: conv1d, conv2d, unfold and every pooling op") {
    check_grad([](const Inputs& x) { return tg::conv2d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .groups = 2}); },
               {rnd({2, 4, 5, 6}), rnd({4, 2, 3, 3}), rnd({4})});
    check_grad([](const Inputs& x) { return tg::conv2d(x[0], x[1], std::nullopt, {.padding = {0, 2}, .dilation = 2}); },
               {rnd({1, 2, 6, 5}), rnd({3, 2, 2, 3})});
    check_grad([](const Inputs& x) { return tg::conv2d(x[0], x[1], x[2]); }, {rnd({2, 3, 3, 3}), rnd({5, 3, 1, 1}), rnd({5})});
    check_grad([](const Inputs& x) { return tg::conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 2, .dilation = 2}); },
               {rnd({2, 3, 9}), rnd({2, 3, 3}), rnd({2})});
    check_grad([](const Inputs& x) { return tg::unfold(x[0], {2, 3}, {.dilation = {2, 1}, .padding = 1, .stride = 2}); },
               {rnd({2, 2, 5, 6})});
    // Pooling: distinct values, far apart, so no tie is within the step
    Tensor spread = Tensor(tg::arange(0.0, 50.0).value() * 0.37f, true);
    {
      tg::Generator g(3);
      tg::Indices order = tg::multinomial(tg::ones({50}), 50, g);  // a shuffled order
      spread = Tensor(tg::reshape(tg::index_select(spread.detach(), 0, order), {2, 1, 5, 5}).value(), true);
    }
    check_grad([](const Inputs& x) { return tg::max_pool2d(x[0], 3, {.stride = 2, .padding = 1, .ceil_mode = true}); },
               {spread});
    check_grad([](const Inputs& x) { return tg::max_pool1d(tg::reshape(x[0], {2, 5, 5}), 2, {.dilation = 2}); }, {spread});
    check_grad([](const Inputs& x) { return tg::avg_pool2d(x[0], 3, {.stride = 2, .padding = 1, .ceil_mode = true}); },
               {rnd({2, 2, 5, 6})});
    check_grad([](const Inputs& x) { return tg::avg_pool1d(x[0], 2, {.count_include_pad = false}); }, {rnd({2, 3, 7})});
    check_grad([](const Inputs& x) { return tg::adaptive_avg_pool2d(x[0], {3, 4}); }, {rnd({1, 2, 5, 7})});
    check_grad([](const Inputs& x) { return tg::adaptive_avg_pool1d(x[0], 3); }, {rnd({2, 7})});
  }

  TEST_CASE("conv2d and pooling refuse bad shapes and sizes, naming the op and the shapes") {
    Tensor x = rnd({2, 4, 5, 5}), w = rnd({6, 2, 3, 3});
    auto conv = [&](const tg::Conv2dFuncOptions& o, const Tensor& xi, const Tensor& wi,
                    const std::optional<Tensor>& b = std::nullopt) { return message_of([&] { tg::conv2d(xi, wi, b, o); }); };
    CHECK(conv({.groups = 2}, x, w).empty());
    CHECK(conv({}, x, w).find("conv2d: input [2, 4, 5, 5], weight [6, 2, 3, 3], groups = 1: the input has 4 channels, "
                              "the weight expects 2") == 0);
    CHECK(conv({.groups = 4}, x, w).find("out_channels 6 must be a positive multiple of groups = 4") != std::string::npos);
    CHECK(conv({.groups = 0}, x, w) == "conv2d: groups must be positive; got 0");
    CHECK(conv({.stride = {1, 0}, .groups = 2}, x, w) == "conv2d: stride must be positive; got [1, 0]");
    CHECK(conv({.padding = -1, .groups = 2}, x, w) == "conv2d: padding must be non-negative; got [-1, -1]");
    CHECK(conv({.dilation = int64_t{1} << 40, .groups = 2}, x, w).find("is too large") != std::string::npos);
    CHECK(conv({.dilation = 3, .groups = 2}, x, w) ==
          "conv2d: the padded input is [5, 5] per channel, smaller than the kernel [3, 3] dilated by [3, 3] ([7, 7])");
    CHECK(conv({}, rnd({4, 5, 5, 1, 1}), w).find("conv2d: expected input [N, C, H, W] or [C, H, W]; got") == 0);
    CHECK(conv({}, x, rnd({6, 4, 3})).find("conv2d: weight must be [out_channels") == 0);
    CHECK(conv({.groups = 2}, x, w, rnd({5})) == "conv2d: bias [5] for weight [6, 2, 3, 3] (expected [6])");
    CHECK(conv({}, rnd({2, 0, 5, 5}), w).find("has an empty dim") != std::string::npos);
    CHECK(message_of([&] { tg::conv1d(rnd({2, 3, 4}), rnd({2, 3, 5})); }) ==
          "conv1d: the padded input is 4 per channel, smaller than the kernel 5 dilated by 1 (5)");
    CHECK(message_of([&] { tg::max_pool2d(x, 2, {.padding = 2}); }) ==
          "max_pool2d: padding [2, 2] must be at most half of kernel size [2, 2]");
    CHECK(message_of([&] { tg::max_pool1d(rnd({2, 3}), 0); }) == "max_pool1d: kernel size must be positive; got 0");
    CHECK(message_of([&] { tg::avg_pool2d(rnd({1, 1, 2, 2}), 3); }).find("avg_pool2d: input of [2, 2] per channel gives an "
                                                                        "output of [0, 0] (too small)") == 0);
    CHECK(message_of([&] { tg::avg_pool2d(x, 2, {.divisor_override = 0}); }) ==
          "avg_pool2d: divisor_override must not be 0");
    CHECK(message_of([&] { tg::adaptive_avg_pool2d(x, {2, -1}); }) ==
          "adaptive_avg_pool2d: output size must be non-negative; got [2, -1]");
    CHECK(message_of([&] { tg::unfold(rnd({3, 4}), 2); }).find("unfold: expected input [N, C, H, W]") == 0);
    // an empty batch is fine, as in PyTorch
    CHECK(tg::conv2d(tg::zeros({0, 4, 5, 5}), w, std::nullopt, {.groups = 2}).shape() == tg::Shape{0, 6, 3, 3});
    // a refused call records nothing and leaves the inputs' versions alone
    const std::size_t before = tg::next_node_index();
    const uint64_t version = x.version();
    CHECK_THROWS_AS(tg::conv2d(x, w), std::invalid_argument);
    CHECK(tg::next_node_index() == before);
    CHECK(x.version() == version);
  }

  TEST_CASE("PyTorch parity: softplus (beta, threshold), log_sigmoid, logsumexp") {
    check_parity("softplus", [](const Inputs& x, const json&) { return tg::softplus(x[0]); });
    check_parity("softplus_beta2_threshold5", [](const Inputs& x, const json& c) {
      return tg::softplus(x[0], c["beta"].get<float>(), c["threshold"].get<float>());
    });
    check_parity("log_sigmoid", [](const Inputs& x, const json&) { return tg::log_sigmoid(x[0]); });
    for (const char* name : {"logsumexp_dim1", "logsumexp_dim0_keepdim", "logsumexp_3d_last"})
      check_parity(name, [](const Inputs& x, const json& c) { return tg::logsumexp(x[0], c["dim"], c["keepdim"]); });
  }

  TEST_CASE("at x = 0 softplus and log_sigmoid have slope 1/2, where relu(x) + log(1 + exp(-|x|)) has 0") {
    Tensor x = tg::zeros({1}, true);
    tg::sum(tg::softplus(x)).backward();
    CHECK(x.grad_dense()(0) == 0.5f);
    x.zero_grad();
    tg::sum(tg::log_sigmoid(x)).backward();
    CHECK(x.grad_dense()(0) == 0.5f);
    x.zero_grad();
    tg::sum(tg::relu(x) + tg::log(1.0f + tg::exp(-tg::abs(x)))).backward();  // the textbook form
    CHECK(x.grad_dense()(0) == 0.0f);
    // so a logistic loss written that way never moves a logit that starts at 0
    x.zero_grad();
    tg::binary_cross_entropy_with_logits(x, tg::ones({1})).backward();
    CHECK(x.grad_dense()(0) == -0.5f);
  }

  TEST_CASE("logsumexp: huge values do not overflow; an empty dim gives -inf; a row of -inf gives -inf") {
    Tensor x(Array{{1000.0f, 1000.0f}, {-inf, -inf}, {inf, 1.0f}});
    const Tensor y = tg::logsumexp(x, 1);
    CHECK(y.value()(0) == doctest::Approx(1000.0f + std::log(2.0f)));
    CHECK(y.value()(1) == -inf);
    CHECK(y.value()(2) == inf);
    CHECK(tg::logsumexp(tg::zeros({2, 0}), 1).to_vector() == std::vector<float>{-inf, -inf});
    CHECK(tg::logsumexp(tg::zeros({0, 2}), 0).to_vector() == std::vector<float>{-inf, -inf});  // (found by the fuzzer)
    CHECK(message_of([] { tg::logsumexp(tg::zeros({2, 3}), 2); }) ==
          "logsumexp: dim 2 out of range for shape [2, 3] (2 dims)");
  }

  TEST_CASE("PyTorch parity: binary_cross_entropy and _with_logits, every reduction, weight and pos_weight") {
    for (const char* r : {"mean", "sum", "none"}) {
      check_parity(std::string("bce_") + r, [](const Inputs& x, const json& c) {
        return tg::binary_cross_entropy(x[0], x[1], std::nullopt, reduction_of(c));
      });
      check_parity(std::string("bce_weight_") + r, [](const Inputs& x, const json& c) {
        return tg::binary_cross_entropy(x[0], x[1], x[2], reduction_of(c));
      });
      check_parity(std::string("bce_logits_") + r, [](const Inputs& x, const json& c) {
        return tg::binary_cross_entropy_with_logits(x[0], x[1], std::nullopt, std::nullopt, reduction_of(c));
      });
      check_parity(std::string("bce_logits_weights_") + r, [](const Inputs& x, const json& c) {
        return tg::binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3], reduction_of(c));
      });
    }
    check_parity("bce_logits_pos_weight_soft", [](const Inputs& x, const json&) {
      return tg::binary_cross_entropy_with_logits(x[0], x[1], std::nullopt, x[2]);
    });
  }

  TEST_CASE("gradcheck: softplus, log_sigmoid, logsumexp, both binary cross-entropies (weights included)") {
    check_grad([](const Inputs& x) { return tg::softplus(x[0], 2.0f, 3.0f); }, {rnd({3, 4})});
    check_grad([](const Inputs& x) { return tg::log_sigmoid(x[0]); }, {rnd({3, 4}, 3.0f)});
    check_grad([](const Inputs& x) { return tg::logsumexp(x[0], 0); }, {rnd({3, 4}, 3.0f)});
    Tensor p = Tensor(tg::rand({3, 4}, gen).value() * 0.8f + 0.1f, true), t = Tensor(tg::rand({3, 4}, gen).value(), true);
    check_grad([](const Inputs& x) { return tg::binary_cross_entropy(x[0], x[1], x[2], tg::Reduction::sum); },
               {p, t, Tensor(tg::rand({4}, gen).value() + 0.5f, true)});
    check_grad(
        [](const Inputs& x) { return tg::binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3], tg::Reduction::mean); },
        {rnd({3, 4}, 2.0f), t, Tensor(tg::rand({3, 1}, gen).value() + 0.5f, true),
         Tensor(tg::rand({4}, gen).value() * 2.0f, true)});
  }

  TEST_CASE("binary cross-entropies refuse what PyTorch refuses, naming the op") {
    CHECK(message_of([] { tg::binary_cross_entropy(Tensor(Array{0.5f, 1.5f}), tg::ones({2})); }) ==
          "binary_cross_entropy: all elements of input should be between 0 and 1; input [2] holds 1.500000 at flat index 1");
    CHECK(message_of([] { tg::binary_cross_entropy(Tensor(Array{NAN}), tg::ones({1})); }).find("between 0 and 1") !=
          std::string::npos);
    CHECK(message_of([] { tg::binary_cross_entropy_with_logits(tg::zeros({2, 3}), tg::zeros({3, 2})); }) ==
          "binary_cross_entropy_with_logits: target [3, 2] and input [2, 3] must have the same shape");
    CHECK(message_of([] {
            tg::binary_cross_entropy_with_logits(tg::zeros({2, 3}), tg::zeros({2, 3}), std::nullopt, tg::ones({2}));
          }) == "binary_cross_entropy_with_logits: pos_weight [2] does not broadcast to the input's shape [2, 3]");
    CHECK(message_of([] { tg::binary_cross_entropy(tg::zeros({2}), tg::zeros({2}), tg::ones({2, 2})); }) ==
          "binary_cross_entropy: weight [2, 2] does not broadcast to the input's shape [2]");
    // probabilities of exactly 0 and 1 give 100, not inf (each log is clamped at -100)
    CHECK(tg::binary_cross_entropy(Tensor(Array{0.0f, 1.0f}), Tensor(Array{1.0f, 0.0f}), std::nullopt,
                                   tg::Reduction::none)
              .to_vector() == std::vector<float>{100, 100});
  }

  TEST_CASE("PyTorch parity: batch_norm in training (running statistics updated in place) and in eval") {
    for (const char* name :
         {"batch_norm_train_2d", "batch_norm_train_3d", "batch_norm_train_4d", "batch_norm_train_no_running",
          "batch_norm_train_no_affine", "batch_norm_eval_4d", "batch_norm_eval_no_affine"}) {
      const json& c = op_case(name);
      std::optional<Tensor> rm, rv;
      if (!c["running_in"].is_null()) {
        rm = Tensor(to_array(c["running_in"][0]));
        rv = Tensor(to_array(c["running_in"][1]));
      }
      check_parity(
          name,
          [&](const Inputs& x, const json& cc) {
            std::optional<Tensor> w, b;
            if (x.size() == 3) w = x[1], b = x[2];
            return tg::batch_norm(x[0], rm, rv, w, b, cc["training"], cc["momentum"], cc["eps"]);
          },
          1e-5, 1e-5);
      if (rm) {
        CAPTURE(name);
        CHECK_ALLCLOSE(rm->value(), to_array(c["running_out"][0]), 1e-5, 1e-6);
        CHECK_ALLCLOSE(rv->value(), to_array(c["running_out"][1]), 1e-5, 1e-6);
        CHECK(rm->version() == (c["training"].get<bool>() ? 1u : 0u));
      }
    }
  }

  TEST_CASE("gradcheck: batch_norm, training and eval") {
    Tensor rm = tg::zeros({3}), rv = tg::ones({3});
    check_grad([&](const Inputs& x) { return tg::batch_norm(x[0], std::nullopt, std::nullopt, x[1], x[2], true); },
               {rnd({4, 3, 2}, 2.0f), rnd({3}), rnd({3})});
    check_grad([&](const Inputs& x) { return tg::batch_norm(x[0], rm, rv, x[1], x[2], false); },
               {rnd({4, 3, 2}, 2.0f), rnd({3}), rnd({3})});
  }

  TEST_CASE("batch_norm refuses bad shapes and missing statistics, and then changes nothing") {
    Tensor rm = tg::zeros({3}), rv = tg::ones({3});
    CHECK(message_of([&] { tg::batch_norm(tg::zeros({2, 4}), rm, rv); }) ==
          "batch_norm: running_mean [3] for input [2, 4] (expected [4], one per channel)");
    CHECK(message_of([&] { tg::batch_norm(tg::zeros({1, 3}), rm, rv, std::nullopt, std::nullopt, true); }) ==
          "batch_norm: expected more than 1 value per channel when training; got input [1, 3]");
    CHECK(message_of([&] { tg::batch_norm(tg::zeros({2, 3}), std::nullopt, std::nullopt); }) ==
          "batch_norm: running_mean and running_var are needed when not training");
    CHECK(message_of([&] { tg::batch_norm(tg::zeros({3}), rm, rv); }).find("batch_norm: input must be [N, C, ...]") == 0);
    CHECK(message_of([&] { tg::batch_norm(tg::zeros({2, 3}), rm, std::nullopt, std::nullopt, std::nullopt, true); }) ==
          "batch_norm: give both running_mean and running_var, or neither");
    CHECK(rm.version() == 0);
    CHECK(rv.version() == 0);
  }
}
