// Convolution and pooling: unfold (im2col), conv1d/conv2d as im2col + one GEMM per image and group,
// max/avg/adaptive pools.
#include "../conv.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "../check.hpp"
#include "../kernels/dispatch.hpp"
#include "../kernels/gemm.hpp"
#include "../kernels/loop.hpp"
#include "../kernels/parallel.hpp"
#include "../kernels/reduce.hpp"
#include "../kernels/table_memory.hpp"
#include "../tape.hpp"

namespace tg {

using kernels::gemm;

namespace {

// ------------------------------------------------------------------ sizes
//
// Every op here works on an input seen as [N, C, H, W]; a 1-d op is the 2-d one
// with H = 1 and windows of height 1, and an input without N has N = 1.

struct Layout {
  std::size_t spatial;  // 1 or 2
  bool batched;
  std::size_t n, c, h, w;
};

Layout layout_of(const char* op, const Shape& s, std::size_t spatial) {
  if (s.size() != spatial + 1 && s.size() != spatial + 2)
    throw std::invalid_argument(message(op, ": expected input ",
                                        spatial == 2 ? "[N, C, H, W] or [C, H, W]" : "[N, C, L] or [C, L]",
                                        "; got ", s));
  const bool batched = s.size() == spatial + 2;
  const Layout l{spatial, batched, batched ? s[0] : 1, s[batched ? 1 : 0], spatial == 2 ? s[s.size() - 2] : 1,
                 s.back()};
  if (l.c == 0 || l.h == 0 || l.w == 0)
    throw std::invalid_argument(
        message(op, ": input ", s, " has an empty dim (only the batch dim may be 0)"));
  return l;
}

// The output's shape: the input's layout with `channels` and an oh x ow grid.
Shape shape_for(const Layout& l, std::size_t channels, std::size_t oh, std::size_t ow) {
  Shape s;
  if (l.batched) s.push_back(l.n);
  s.push_back(channels);
  if (l.spatial == 2) s.push_back(oh);
  s.push_back(ow);
  return s;
}

// A size as the user wrote it: [h, w] for a 2-d op, one number for a 1-d op.
std::string str(Size2 s, const Layout& l) {
  if (l.spatial == 1) return std::to_string(s.w);
  return std::string("[") + std::to_string(s.h) + ", " + std::to_string(s.w) + "]";
}

// Throws unless both sizes are at least `least`, and small enough that sums of
// a few of them cannot overflow.
void check_size(const char* op, const char* what, Size2 s, int64_t least, const Layout& l) {
  constexpr int64_t most = int64_t{1} << 32;
  if (s.h < least || s.w < least)
    throw std::invalid_argument(
        message(op, ": ", what, " must be ", least > 0 ? "positive" : "non-negative", "; got ", str(s, l)));
  if (s.h > most || s.w > most)
    throw std::invalid_argument(message(op, ": ", what, " ", str(s, l), " is too large"));
}

// A 1-d op's sizes as a 2-d op's: height 1, no padding along it.
Size2 as_width(int64_t w, int64_t height) {
  return {height, w};
}

// The sizes of one window op: the input grid, the kernel and how it moves, the output grid.
struct Window {
  std::size_t n, c, h, w;
  std::size_t kh, kw, sh, sw, ph, pw, dh, dw;
  std::size_t oh, ow;
};

Window window_for(const Layout& l, Size2 k, Size2 s, Size2 p, Size2 d, std::size_t oh, std::size_t ow) {
  auto u = [](int64_t v) { return static_cast<std::size_t>(v); };
  return {l.n, l.c, l.h, l.w, u(k.h), u(k.w), u(s.h), u(s.w), u(p.h), u(p.w), u(d.h), u(d.w), oh, ow};
}

// A convolution's (and unfold's) window: each output position needs the whole
// dilated kernel inside the padded input.
Window conv_window(const char* op, const Layout& l, Size2 k, Size2 s, Size2 p, Size2 d) {
  check_size(op, "kernel size", k, 1, l);
  check_size(op, "stride", s, 1, l);
  check_size(op, "padding", p, 0, l);
  check_size(op, "dilation", d, 1, l);
  const int64_t span_h = d.h * (k.h - 1) + 1, span_w = d.w * (k.w - 1) + 1;
  const int64_t in_h = static_cast<int64_t>(l.h) + 2 * p.h, in_w = static_cast<int64_t>(l.w) + 2 * p.w;
  if (span_h > in_h || span_w > in_w)
    throw std::invalid_argument(message(op, ": the padded input is ", str({in_h, in_w}, l),
                                        " per channel, smaller than the kernel ", str(k, l), " dilated by ",
                                        str(d, l), " (", str({span_h, span_w}, l), ")"));
  const auto oh = static_cast<std::size_t>((in_h - span_h) / s.h + 1);
  const auto ow = static_cast<std::size_t>((in_w - span_w) / s.w + 1);
  return window_for(l, k, s, p, d, oh, ow);
}

// Pooling's output length along one dim (PyTorch's pooling_output_shape): with
// ceil_mode a last, partial window counts if it starts inside the input or its
// left padding.
int64_t pooled_length(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;  // floor division
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

Window pool_window(const char* op, const Layout& l, Size2 k, Size2 s, Size2 p, Size2 d, bool ceil_mode) {
  check_size(op, "kernel size", k, 1, l);
  check_size(op, "stride", s, 1, l);
  check_size(op, "padding", p, 0, l);
  check_size(op, "dilation", d, 1, l);
  if (p.h > k.h / 2 || p.w > k.w / 2)
    throw std::invalid_argument(
        message(op, ": padding ", str(p, l), " must be at most half of kernel size ", str(k, l)));
  const int64_t oh = pooled_length(static_cast<int64_t>(l.h), k.h, s.h, p.h, d.h, ceil_mode);
  const int64_t ow = pooled_length(static_cast<int64_t>(l.w), k.w, s.w, p.w, d.w, ceil_mode);
  if (oh < 1 || ow < 1)
    throw std::invalid_argument(
        message(op, ": input of ", str({static_cast<int64_t>(l.h), static_cast<int64_t>(l.w)}, l),
                " per channel gives an output of ", str({oh, ow}, l), " (too small) for kernel ", str(k, l),
                ", stride ", str(s, l), ", padding ", str(p, l), ", dilation ", str(d, l)));
  return window_for(l, k, s, p, d, static_cast<std::size_t>(oh), static_cast<std::size_t>(ow));
}

// ------------------------------------------------------- im2col and back

// The outputs x in [0, n_out) whose input x * stride + offset lies in [0, n_in).
struct Range {
  std::size_t first, end;
};
Range inside(std::size_t n_out, std::size_t n_in, std::size_t stride, int64_t offset) {
  const auto s = static_cast<int64_t>(stride), last = static_cast<int64_t>(n_in) - 1 - offset;
  const int64_t first = offset >= 0 ? 0 : (-offset + s - 1) / s;
  const int64_t end = last < 0 ? 0 : last / s + 1;
  const auto out = static_cast<int64_t>(n_out);
  return {static_cast<std::size_t>(std::min(first, out)),
          static_cast<std::size_t>(std::clamp(end, std::min(first, out), out))};
}

// One image's patches as the columns of a matrix: for channel ch < channels,
// kernel tap (i, j) and output position (y, x),
//   cols[(ch kh + i) kw + j][y ow + x] = img[ch][y sh + i dh - ph][x sw + j dw - pw],
// or 0 where that lies in the padding. With fold = true it runs the other way
// and adds each column entry back into the image: the gradient of unfold.
template <bool fold>
void im2col(std::conditional_t<fold, float*, const float*> img, std::size_t channels, const Window& g,
            std::conditional_t<fold, const float*, float*> cols) {
  for (std::size_t ch = 0; ch < channels; ++ch)
    for (std::size_t i = 0; i < g.kh; ++i)
      for (std::size_t j = 0; j < g.kw; ++j) {
        const int64_t x_offset = static_cast<int64_t>(j * g.dw) - static_cast<int64_t>(g.pw);
        const Range xs = inside(g.ow, g.w, g.sw, x_offset);
        for (std::size_t y = 0; y < g.oh; ++y, cols += g.ow) {
          const int64_t iy = static_cast<int64_t>(y * g.sh + i * g.dh) - static_cast<int64_t>(g.ph);
          const bool row_inside = iy >= 0 && iy < static_cast<int64_t>(g.h);
          if constexpr (!fold) {  // zeros where the window covers padding
            std::fill(cols, cols + (row_inside ? xs.first : g.ow), 0.0f);
            if (row_inside) std::fill(cols + xs.end, cols + g.ow, 0.0f);
          }
          if (!row_inside) continue;
          // the input pixels under outputs xs.first .. xs.end - 1, sw apart
          auto* row = img + (ch * g.h + static_cast<std::size_t>(iy)) * g.w +
                      static_cast<std::ptrdiff_t>(static_cast<int64_t>(xs.first * g.sw) + x_offset);
          const std::size_t n = xs.end - xs.first;
          if constexpr (fold) {
            for (std::size_t k = 0; k < n; ++k) row[k * g.sw] += cols[xs.first + k];
          } else if (g.sw == 1) {  // a contiguous run: the common case
            for (std::size_t k = 0; k < n; ++k) cols[xs.first + k] = row[k];
          } else {
            for (std::size_t k = 0; k < n; ++k) cols[xs.first + k] = row[k * g.sw];
          }
        }
      }
}

// The same for a window that moves by 1 along both dims over an input as wide
// as the output (a "same" convolution: 3x3 with padding 1, 5x5 with padding
// 2, ...). Then tap (i, j)'s row of the patch matrix is the channel's plane
// shifted by a fixed offset, and is copied (or added back) in one run, not one
// short run per output row; the entries between the runs' rows, which the
// shift wraps onto the neighbouring row's other edge, are zeros of the padding
// (fold: are cleared in `cols`, which it overwrites, before the run is added).
// The same values as im2col; tests/test_ops_nn.cpp holds the two equal.
bool shifted_rows(const Window& g) {
  return g.sh == 1 && g.sw == 1 && g.ow == g.w;
}

template <bool fold>
[[gnu::always_inline]] inline void im2col_shifted(std::conditional_t<fold, float*, const float*> img,
                                                  std::size_t channels, const Window& g, float* cols) {
  const std::size_t plane = g.oh * g.ow, in_plane = g.h * g.w;
  for (std::size_t ch = 0; ch < channels; ++ch, img += in_plane)
    for (std::size_t i = 0; i < g.kh; ++i) {
      const int64_t y_offset = static_cast<int64_t>(i * g.dh) - static_cast<int64_t>(g.ph);
      const Range ys = inside(g.oh, g.h, 1, y_offset);
      for (std::size_t j = 0; j < g.kw; ++j, cols += plane) {
        const int64_t x_offset = static_cast<int64_t>(j * g.dw) - static_cast<int64_t>(g.pw);
        const Range xs = inside(g.ow, g.w, 1, x_offset);
        if (ys.first == ys.end || xs.first == xs.end) {  // the tap sees only padding
          if constexpr (!fold) std::fill(cols, cols + plane, 0.0f);
          continue;
        }
        // outputs [begin, end) of the plane read inputs [begin + shift, end + shift)
        const std::size_t begin = ys.first * g.ow + xs.first, end = (ys.end - 1) * g.ow + xs.end;
        const std::ptrdiff_t shift = y_offset * static_cast<std::ptrdiff_t>(g.w) + x_offset;
        auto clear_wrapped = [&] {  // the entries between the rows' runs
          for (std::size_t y = ys.first; y + 1 < ys.end; ++y)
            std::fill(cols + y * g.ow + xs.end, cols + (y + 1) * g.ow + xs.first, 0.0f);
        };
        if constexpr (fold) {
          clear_wrapped();
          float* in = img + static_cast<std::ptrdiff_t>(begin) + shift;
          for (std::size_t k = 0; k < end - begin; ++k) in[k] += cols[begin + k];
        } else {
          std::fill(cols, cols + begin, 0.0f);
          const float* in = img + static_cast<std::ptrdiff_t>(begin) + shift;
          std::copy(in, in + (end - begin), cols + begin);
          clear_wrapped();
          std::fill(cols + end, cols + plane, 0.0f);
        }
      }
    }
}

// One image's patches (channels of it) into cols, and cols added back into
// the image; fold overwrites cols. Also compiled for AVX2 and AVX-512
// (core/kernels/dispatch.hpp): the same bits.
TG_ALSO_FOR_AVX2 void unfold_image(const float* img, std::size_t channels, const Window& g, float* cols) {
  if (shifted_rows(g))
    im2col_shifted<false>(img, channels, g, cols);
  else
    im2col<false>(img, channels, g, cols);
}
TG_ALSO_FOR_AVX2 void fold_image(float* img, std::size_t channels, const Window& g, float* cols) {
  if (shifted_rows(g))
    im2col_shifted<true>(img, channels, g, cols);
  else
    im2col<true>(img, channels, g, cols);
}

// ------------------------------------------------------------ convolution

// A 1x1 kernel with stride 1 and no padding reads each pixel once: its patch
// matrix is the image itself, [channels, h w], and no copy is made.
bool pointwise(const Window& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

// The patches of channels [first, first + channels) of image n: the image itself
// for a pointwise kernel, else im2col into `buffer`.
const float* patches(const float* x, std::size_t n, std::size_t first, std::size_t channels, const Window& g,
                     std::vector<float>& buffer) {
  const float* img = x + (n * g.c + first) * g.h * g.w;
  if (pointwise(g)) return img;
  buffer.resize(channels * g.kh * g.kw * g.oh * g.ow);
  unfold_image(img, channels, g, buffer.data());
  return buffer.data();
}

// y[n, o] = bias[o] + weight[o] . patches, for each image n and each group: one
// [out/groups, k] x [k, oh ow] product per image and group, k = in/groups kh kw.
// Image by image, so that an image's patches (k x oh ow floats, recomputed in
// backward rather than kept: 29 MB for 64 images of 16 channels at 28 x 28)
// and its slices of the output stay in the cache between the steps that use them.
Tensor convolution(const char* op, const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                   const Window& g, std::size_t groups, const Shape& out_shape) {
  const std::size_t out_c = weight.shape()[0], cg = g.c / groups, og = out_c / groups;
  const std::size_t k = cg * g.kh * g.kw, l = g.oh * g.ow;
  Array y = empty_array(op, out_shape);
  advise_huge_pages(y.data(), y.size());  // a fresh buffer every step: 2 MB pages fault 512 times less often
  const float *X = x.value().data(), *W = weight.value().data(), *B = bias ? bias->value().data() : nullptr;
  float* Y = y.data();
  parallel_for(g.n, kernels::grain_for(g.n, g.n * out_c * k * l), [&](std::size_t lo, std::size_t hi) {
    std::vector<float> buffer;
    for (std::size_t n = lo; n < hi; ++n) {
      float* yn = Y + n * out_c * l;
      for (std::size_t o = 0; o < out_c; ++o)
        std::fill_n(yn + o * l, l, B ? B[o] : 0.0f);  // the products add on top
      for (std::size_t gr = 0; gr < groups; ++gr)     // [og, k] x [k, l] -> [og, l]
        gemm(false, false, og, l, k, W + gr * og * k, patches(X, n, gr * cg, cg, g, buffer), yn + gr * og * l,
             true);
    }
  });

  std::vector<Tensor> inputs{x, weight};
  if (bias) inputs.push_back(*bias);
  return record(
      op, std::move(y), std::move(inputs),
      [g, groups, out_c, cg, og, k, l](const Array& gy, const Node& node, Grads& d) {
        const float *X = node.input(0).data(), *W = node.input(1).data(), *G = gy.data();
        const bool want_x = node.needs_grad(0), want_w = node.needs_grad(1),
                   want_b = d.size() == 3 && node.needs_grad(2);
        Array gx;
        if (want_x) {
          gx = empty_array(node.op.c_str(), node.input_shape(0));
          advise_huge_pages(gx.data(), gx.size());
        }
        // The weight's gradient is summed as its transpose, [groups, k, og]
        // (dW^T = patches gy^T: BLAS is faster at that shape than at
        // gy patches^T), the bias's in double; each chunk of images sums
        // its own, and the chunks' sums are added in order.
        struct Sums {
          std::vector<float> wt;
          std::vector<double> b;
        };
        std::map<std::size_t, Sums> chunks;
        std::mutex chunks_lock;
        parallel_for(g.n, kernels::grain_for(g.n, g.n * out_c * k * l), [&](std::size_t lo, std::size_t hi) {
          Sums sums{std::vector<float>(want_w ? groups * k * og : 0),
                    std::vector<double>(want_b ? out_c : 0)};
          std::vector<float> buffer, dcols(want_x && !pointwise(g) ? k * l : 0);
          for (std::size_t n = lo; n < hi; ++n)
            for (std::size_t gr = 0; gr < groups; ++gr) {
              const float* gyn = G + (n * out_c + gr * og) * l;  // [og, l]
              if (want_w)                                        // += patches gy^T: [k, l] x [l, og]
                gemm(false, true, k, og, l, patches(X, n, gr * cg, cg, g, buffer), gyn,
                     sums.wt.data() + gr * k * og, true);
              if (want_b)
                for (std::size_t o = 0; o < og; ++o) sums.b[gr * og + o] += kernels::lane_sum(gyn + o * l, l);
              if (want_x) {  // d patches = W^T gy: [k, og] x [og, l], folded back into the image
                float* img = gx.data() + (n * g.c + gr * cg) * g.h * g.w;
                if (pointwise(g)) {  // the patches are the image: write straight into it
                  gemm(true, false, k, l, og, W + gr * og * k, gyn, img);
                } else {
                  gemm(true, false, k, l, og, W + gr * og * k, gyn, dcols.data());
                  std::fill_n(img, cg * g.h * g.w, 0.0f);
                  fold_image(img, cg, g, dcols.data());
                }
              }
            }
          const std::lock_guard<std::mutex> hold(chunks_lock);
          chunks.emplace(lo, std::move(sums));
        });
        if (want_x) d[0] = std::move(gx);
        if (want_w) {  // the chunks' [k, og] sums, added in order and transposed to [og, k]
          Array gw = zeros_array(node.op.c_str(), node.input_shape(1));
          for (const auto& [lo, sums] : chunks)
            for (std::size_t gr = 0; gr < groups; ++gr)
              for (std::size_t o = 0; o < og; ++o)
                for (std::size_t i = 0; i < k; ++i)
                  gw.data()[(gr * og + o) * k + i] += sums.wt[(gr * k + i) * og + o];
          d[1] = std::move(gw);
        }
        if (want_b) {  // dbias[o] = sum of gy[n, o, :] over n
          std::vector<double> total(out_c, 0.0);
          for (const auto& [lo, sums] : chunks)
            for (std::size_t o = 0; o < out_c; ++o) total[o] += sums.b[o];
          Array gb = empty_array(node.op.c_str(), node.input_shape(2));
          for (std::size_t o = 0; o < out_c; ++o) gb.data()[o] = static_cast<float>(total[o]);
          d[2] = std::move(gb);
        }
      });
}

// Checks a convolution's weight, bias and groups against the input and returns its window.
Window conv_checked(const char* op, std::size_t spatial, const Tensor& x, const Tensor& weight,
                    const std::optional<Tensor>& bias, Size2 s, Size2 p, Size2 d, int64_t groups) {
  const Layout l = layout_of(op, x.shape(), spatial);
  const Shape ws = weight.shape();
  const std::string shapes = "input " + shape_str(x.shape()) + ", weight " + shape_str(ws);
  check(ws.size() == spatial + 2, op, ": weight must be ",
        spatial == 2 ? "[out_channels, in_channels / groups, kH, kW]"
                     : "[out_channels, in_channels / groups, kL]",
        "; got ", ws);
  check(groups >= 1, op, ": groups must be positive; got ", groups);
  const auto gr = static_cast<std::size_t>(groups);
  if (ws[0] == 0 || ws[0] % gr != 0)
    throw std::invalid_argument(message(op, ": ", shapes, ": out_channels ", ws[0],
                                        " must be a positive multiple of groups = ", groups));
  check(ws[1] * gr == l.c, op, ": ", shapes, ", groups = ", groups, ": the input has ", l.c,
        " channels, the weight expects ", ws[1] * gr, " (", ws[1], " per group)");
  if (bias && bias->shape() != Shape{ws[0]})
    throw std::invalid_argument(
        message(op, ": bias ", bias->shape(), " for weight ", ws, " (expected [", ws[0], "])"));
  const Size2 k = spatial == 2 ? Size2(static_cast<int64_t>(ws[2]), static_cast<int64_t>(ws[3]))
                               : Size2(1, static_cast<int64_t>(ws[2]));
  return conv_window(op, l, k, s, p, d);
}

// ------------------------------------------------------------------ pooling

// The input positions one output position of one dim reads: first, first +
// step, ... below end (clipped to the input), and the window's size for an
// average (count).
struct Span {
  std::size_t first, end, count;
};

// Max pooling: taps o s - p + t d for t < k, those inside [0, in).
std::vector<Span> max_spans(std::size_t out, std::size_t in, std::size_t k, std::size_t s, std::size_t p,
                            std::size_t d) {
  std::vector<Span> spans(out);
  for (std::size_t o = 0; o < out; ++o) {
    int64_t first = static_cast<int64_t>(o * s) - static_cast<int64_t>(p);
    const int64_t end = std::min(first + static_cast<int64_t>(d * (k - 1) + 1), static_cast<int64_t>(in));
    while (first < 0) first += static_cast<int64_t>(d);
    spans[o] = {static_cast<std::size_t>(first), static_cast<std::size_t>(std::max(first, end)), 0};
  }
  return spans;
}

// Average pooling (PyTorch's avg_pool2d): the window [o s - p, o s - p + k)
// clipped to the padded input; count is its size with the padding, or
// without it when !count_include_pad.
std::vector<Span> avg_spans(std::size_t out, std::size_t in, std::size_t k, std::size_t s, std::size_t p,
                            bool count_include_pad) {
  std::vector<Span> spans(out);
  for (std::size_t o = 0; o < out; ++o) {
    const int64_t start = static_cast<int64_t>(o * s) - static_cast<int64_t>(p);
    const int64_t end_padded = std::min(start + static_cast<int64_t>(k), static_cast<int64_t>(in + p));
    const auto first = static_cast<std::size_t>(std::max<int64_t>(start, 0));
    const auto end = static_cast<std::size_t>(std::min(end_padded, static_cast<int64_t>(in)));
    spans[o] = {first, end, count_include_pad ? static_cast<std::size_t>(end_padded - start) : end - first};
  }
  return spans;
}

// Adaptive pooling: floor(o in / out) .. ceil((o + 1) in / out).
std::vector<Span> adaptive_spans(std::size_t out, std::size_t in) {
  std::vector<Span> spans(out);
  for (std::size_t o = 0; o < out; ++o) {
    const std::size_t first = o * in / out, end = ((o + 1) * in + out - 1) / out;
    spans[o] = {first, end, end - first};
  }
  return spans;
}

// The max over each window of each channel; the gradient goes to the position
// that won (the first maximum; a NaN wins, the last one if several).
Tensor max_pool(const char* op, const Tensor& x, const Layout& lay, const Window& g) {
  const std::vector<Span> rows = max_spans(g.oh, g.h, g.kh, g.sh, g.ph, g.dh);
  const std::vector<Span> cols = max_spans(g.ow, g.w, g.kw, g.sw, g.pw, g.dw);
  const std::size_t planes = g.n * g.c, plane = g.h * g.w;
  Array out = empty_array(op, shape_for(lay, g.c, g.oh, g.ow));
  std::vector<int64_t> arg(out.size());  // the winner's place in its plane; -1: a window of padding only
  const float* X = x.value().data();
  float* Y = out.data();
  for (std::size_t pl = 0, at = 0; pl < planes; ++pl)
    for (std::size_t y = 0; y < g.oh; ++y)
      for (std::size_t xo = 0; xo < g.ow; ++xo, ++at) {
        const float* in = X + pl * plane;
        float best = -std::numeric_limits<float>::infinity();
        int64_t won = -1;
        for (std::size_t i = rows[y].first; i < rows[y].end; i += g.dh)
          for (std::size_t j = cols[xo].first; j < cols[xo].end; j += g.dw) {
            const float v = in[i * g.w + j];
            if (won < 0 || v > best || std::isnan(v)) {
              best = v;
              won = static_cast<int64_t>(i * g.w + j);
            }
          }
        Y[at] = best;
        arg[at] = won;
      }
  const std::size_t outs = g.oh * g.ow;
  return record(op, std::move(out), {x},
                [arg = std::move(arg), plane, outs](const Array& gy, const Node& n, Grads& d) {
                  Array gx = zeros_array(n.op.c_str(), n.input_shape(0));
                  for (std::size_t at = 0; at < arg.size(); ++at)
                    if (arg[at] >= 0)
                      gx.data()[at / outs * plane + static_cast<std::size_t>(arg[at])] += gy.data()[at];
                  d[0] = std::move(gx);
                });
}

// What the sum over the window rows x cols is divided by.
double divisor_of(const Span& rows, const Span& cols, std::optional<int64_t> divisor) {
  return divisor ? static_cast<double>(*divisor)
                 : static_cast<double>(rows.count) * static_cast<double>(cols.count);
}

// The sum over each window (in double) divided by rows[y].count * cols[x].count,
// or by divisor when given; the gradient spreads each output's share evenly
// over its window.
Tensor box_average(const char* op, const Tensor& x, const Layout& lay, std::vector<Span> rows,
                   std::vector<Span> cols, std::optional<int64_t> divisor) {
  const std::size_t planes = lay.n * lay.c, plane = lay.h * lay.w, oh = rows.size(), ow = cols.size();
  Array out = empty_array(op, shape_for(lay, lay.c, oh, ow));
  const float* X = x.value().data();
  for (std::size_t pl = 0, at = 0; pl < planes; ++pl)
    for (std::size_t y = 0; y < oh; ++y)
      for (std::size_t xo = 0; xo < ow; ++xo, ++at) {
        double sum = 0;
        for (std::size_t i = rows[y].first; i < rows[y].end; ++i)
          for (std::size_t j = cols[xo].first; j < cols[xo].end; ++j) sum += X[pl * plane + i * lay.w + j];
        out.data()[at] = static_cast<float>(sum / divisor_of(rows[y], cols[xo], divisor));
      }
  return record(op, std::move(out), {x},
                [rows = std::move(rows), cols = std::move(cols), divisor, planes, plane, w = lay.w](
                    const Array& gy, const Node& n, Grads& d) {
                  Array gx = zeros_array(n.op.c_str(), n.input_shape(0));
                  for (std::size_t pl = 0, at = 0; pl < planes; ++pl)
                    for (std::size_t y = 0; y < rows.size(); ++y)
                      for (std::size_t xo = 0; xo < cols.size(); ++xo, ++at) {
                        const auto share =
                            static_cast<float>(gy.data()[at] / divisor_of(rows[y], cols[xo], divisor));
                        for (std::size_t i = rows[y].first; i < rows[y].end; ++i)
                          for (std::size_t j = cols[xo].first; j < cols[xo].end; ++j)
                            gx.data()[pl * plane + i * w + j] += share;
                      }
                  d[0] = std::move(gx);
                });
}

Tensor max_pool_nd(const char* op, std::size_t spatial, const Tensor& x, Size2 k, Size2 s, Size2 p, Size2 d,
                   bool ceil_mode) {
  const Layout l = layout_of(op, x.shape(), spatial);
  return max_pool(op, x, l, pool_window(op, l, k, s, p, d, ceil_mode));
}

Tensor avg_pool_nd(const char* op, std::size_t spatial, const Tensor& x, Size2 k, Size2 s, Size2 p,
                   bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor) {
  const Layout l = layout_of(op, x.shape(), spatial);
  const Window g = pool_window(op, l, k, s, p, 1, ceil_mode);
  if (divisor && *divisor == 0) throw std::invalid_argument(message(op, ": divisor_override must not be 0"));
  return box_average(op, x, l, avg_spans(g.oh, g.h, g.kh, g.sh, g.ph, count_include_pad),
                     avg_spans(g.ow, g.w, g.kw, g.sw, g.pw, count_include_pad), divisor);
}

Tensor adaptive_avg_pool_nd(const char* op, std::size_t spatial, const Tensor& x, Size2 out) {
  const Layout l = layout_of(op, x.shape(), spatial);
  check_size(op, "output size", out, 0, l);
  return box_average(op, x, l, adaptive_spans(static_cast<std::size_t>(out.h), l.h),
                     adaptive_spans(static_cast<std::size_t>(out.w), l.w), std::nullopt);
}

}  // namespace

// ---------------------------------------------------------------- the ops

Tensor unfold(const Tensor& input, Size2 kernel_size, const UnfoldOptions& o) {
  const Layout l = layout_of("unfold", input.shape(), 2);
  const Window g = conv_window("unfold", l, kernel_size, o.stride, o.padding, o.dilation);
  const std::size_t rows = g.c * g.kh * g.kw, cols = g.oh * g.ow, image = g.c * g.h * g.w;
  Shape out_shape{rows, cols};
  if (l.batched) out_shape.insert(out_shape.begin(), l.n);
  Array out = empty_array("unfold", out_shape);
  for (std::size_t n = 0; n < g.n; ++n)  // [C, H, W] -> [C kh kw, oh ow], image by image
    unfold_image(input.value().data() + n * image, g.c, g, out.data() + n * rows * cols);
  return record("unfold", std::move(out), {input},
                [g, rows, cols, image](const Array& gy, const Node& n, Grads& d) {
                  Array gx = zeros_array(n.op.c_str(), n.input_shape(0));
                  for (std::size_t i = 0; i < g.n; ++i)
                    im2col<true>(gx.data() + i * image, g.c, g, gy.data() + i * rows * cols);
                  d[0] = std::move(gx);
                });
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
              const Conv2dFuncOptions& o) {
  const Window g = conv_checked("conv2d", 2, input, weight, bias, o.stride, o.padding, o.dilation, o.groups);
  const Layout l = layout_of("conv2d", input.shape(), 2);
  return convolution("conv2d", input, weight, bias, g, static_cast<std::size_t>(o.groups),
                     shape_for(l, weight.shape()[0], g.oh, g.ow));
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
              const Conv1dFuncOptions& o) {
  const Window g = conv_checked("conv1d", 1, input, weight, bias, as_width(o.stride, 1),
                                as_width(o.padding, 0), as_width(o.dilation, 1), o.groups);
  const Layout l = layout_of("conv1d", input.shape(), 1);
  return convolution("conv1d", input, weight, bias, g, static_cast<std::size_t>(o.groups),
                     shape_for(l, weight.shape()[0], g.oh, g.ow));
}

Tensor max_pool2d(const Tensor& input, Size2 kernel_size, const MaxPool2dFuncOptions& o) {
  return max_pool_nd("max_pool2d", 2, input, kernel_size, o.stride.value_or(kernel_size), o.padding,
                     o.dilation, o.ceil_mode);
}

Tensor max_pool1d(const Tensor& input, int64_t kernel_size, const MaxPool1dFuncOptions& o) {
  return max_pool_nd("max_pool1d", 1, input, as_width(kernel_size, 1),
                     as_width(o.stride.value_or(kernel_size), 1), as_width(o.padding, 0),
                     as_width(o.dilation, 1), o.ceil_mode);
}

Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, const AvgPool2dFuncOptions& o) {
  return avg_pool_nd("avg_pool2d", 2, input, kernel_size, o.stride.value_or(kernel_size), o.padding,
                     o.ceil_mode, o.count_include_pad, o.divisor_override);
}

Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, const AvgPool1dFuncOptions& o) {
  return avg_pool_nd("avg_pool1d", 1, input, as_width(kernel_size, 1),
                     as_width(o.stride.value_or(kernel_size), 1), as_width(o.padding, 0), o.ceil_mode,
                     o.count_include_pad, std::nullopt);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size) {
  return adaptive_avg_pool_nd("adaptive_avg_pool2d", 2, input, output_size);
}

Tensor adaptive_avg_pool1d(const Tensor& input, int64_t output_size) {
  return adaptive_avg_pool_nd("adaptive_avg_pool1d", 1, input, as_width(output_size, 1));
}

}  // namespace tg
