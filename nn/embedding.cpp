// Embedding and EmbeddingBag: lookups whose gradients are SparseRows (built in nn/embedding_grad.cpp).
#include "embedding.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <xtensor/xadapt.hpp>

#include "../core/kernels/dispatch.hpp"
#include "../core/kernels/loop.hpp"
#include "../core/kernels/parallel.hpp"
#include "../core/kernels/table_memory.hpp"
#include "../core/ops.hpp"
#include "../core/tape.hpp"
#include "embedding_grad.hpp"
#include "init.hpp"

namespace tg::nn {

namespace {

using detail::Plan;
using detail::skip;
using detail::weight_grad;

// ------------------------------------------------------- shared by both layers

// padding_idx in [-num, num) -> [0, num); throws naming `layer` otherwise.
std::optional<int64_t> normalize_padding(const char* layer, std::optional<int64_t> padding_idx,
                                         std::size_t num) {
  if (!padding_idx) return std::nullopt;
  const int64_t n = static_cast<int64_t>(num), p = *padding_idx;
  if (p < -n || p >= n)
    throw std::invalid_argument(std::string(layer) + ": padding_idx " + std::to_string(p) +
                                " out of range for " + std::to_string(num) + " embeddings");
  return p < 0 ? p + n : p;
}

bool is_padding(int64_t row, std::optional<int64_t> padding_idx) {
  return padding_idx && row == *padding_idx;
}

void check_norm_type(const char* layer, float norm_type) {
  if (!(norm_type > 0.0f))
    throw std::invalid_argument(std::string(layer) + ": norm_type " + std::to_string(norm_type) +
                                " must be positive (or infinity)");
}

Tensor make_weight(const char* layer, std::size_t num, std::size_t dim, std::optional<int64_t> padding_idx,
                   Generator& gen) {
  Array values = empty_array(layer, {num, dim});
  advise_huge_pages(values.data(), values.size());  // before normal_ touches the pages
  Tensor w = init::normal_(Tensor(std::move(values)), 0.0f, 1.0f, gen);
  if (padding_idx) std::fill_n(w.value_mut().data() + *padding_idx * dim, dim, 0.0f);
  return w;
}

// `weight` is a public member that users may replace: check that it is still a
// table before reading its shape.
void check_weight(const char* layer, const Tensor& weight) {
  if (weight.dim() != 2)
    throw std::invalid_argument(std::string(layer) + ": weight must be 2-D [num, dim]; got " +
                                shape_str(weight.shape()));
}

void check_pretrained(const char* layer, const Array& weight) {
  if (weight.dimension() != 2)
    throw std::invalid_argument(std::string(layer) +
                                "::from_pretrained: weight must be 2-D [num, dim]; got " +
                                shape_str(weight.shape()));
}

// PyTorch's embedding_renorm_: each distinct row read by `rows` whose norm is
// above max_norm is scaled to max_norm. Writes raw storage: not recorded.
// Refused inside the shards of nn::data_parallel, which run forward at once on
// one table: their writes and reads of the same rows would race.
void renorm_rows(const char* layer, Tensor& table, std::vector<int64_t> rows, float max_norm,
                 float norm_type) {
  if (tg::detail::ShardStream::current)
    throw std::logic_error(
        std::string(layer) +
        ": max_norm rescales rows of the weight in place during forward, which the shards of "
        "nn::data_parallel cannot do at once (they share the weight); run that step on one "
        "thread (tg::set_num_threads(1)), or build the layer without max_norm");
  Array& weight = table.value_mut();
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const std::size_t dim = weight.shape()[1];
  for (int64_t r : rows) {
    float* row = weight.data() + r * dim;
    double norm = 0;
    for (std::size_t c = 0; c < dim; ++c)
      norm = std::isinf(norm_type) ? std::max(norm, double(std::abs(row[c])))
                                   : norm + std::pow(std::abs(double(row[c])), double(norm_type));
    if (!std::isinf(norm_type)) norm = std::pow(norm, 1.0 / norm_type);
    if (norm > max_norm) {
      const float scale = static_cast<float>(max_norm / (norm + 1e-7));
      for (std::size_t c = 0; c < dim; ++c) row[c] *= scale;
    }
  }
}

}  // namespace

// ------------------------------------------------------------------ Embedding

Embedding::Embedding(std::size_t num_embeddings, std::size_t embedding_dim, EmbeddingOptions options,
                     Generator& gen)
    : options_(std::move(options)) {
  options_.padding_idx = normalize_padding("Embedding", options_.padding_idx, num_embeddings);
  check_norm_type("Embedding", options_.norm_type);
  weight = register_parameter(
      "weight", make_weight("Embedding", num_embeddings, embedding_dim, options_.padding_idx, gen));
}

Embedding::Embedding(Array w, EmbeddingOptions options, bool requires_grad) : options_(std::move(options)) {
  check_pretrained("Embedding", w);
  options_.padding_idx = normalize_padding("Embedding", options_.padding_idx, w.shape()[0]);
  check_norm_type("Embedding", options_.norm_type);
  weight = register_parameter("weight", Tensor(std::move(w)), requires_grad);
}

Embedding Embedding::from_pretrained(const Array& weight, EmbeddingOptions options, bool freeze) {
  return Embedding(weight, std::move(options), !freeze);
}

Tensor Embedding::forward(const Indices& input) {
  check_weight("Embedding", weight);
  const std::size_t num = num_embeddings(), dim = embedding_dim();
  check_indices("Embedding", input, num);
  auto ids = std::make_unique<const Indices>(input);  // kept by the tape entry: its backward reads them
  const int64_t* index = ids->data();
  if (options_.max_norm)
    renorm_rows("Embedding", weight, {index, index + ids->size()}, *options_.max_norm, options_.norm_type);

  // [n] ids -> [n, dim]: output row k is a copy of table row ids[k]. No multiplication.
  Shape out_shape(input.shape().begin(), input.shape().end());
  out_shape.push_back(dim);
  Array out = xt::empty<float>(out_shape);
  for (std::size_t k = 0; k < ids->size(); ++k)
    std::copy_n(weight.value().data() + index[k] * dim, dim, out.data() + k * dim);

  // A lookup is a bag of one entry: output row k is the bag of entry k, which
  // the padding row leaves empty.
  std::vector<std::size_t> bag_of(ids->size());
  for (std::size_t k = 0; k < bag_of.size(); ++k)
    bag_of[k] = is_padding(index[k], options_.padding_idx) ? skip : k;
  Tensor t = record("embedding", std::move(out), {weight},
                    [coef = std::vector<float>(bag_of.size(), 1.0f), num, dim, sparse = options_.sparse](
                        const Array& g, const Node& n, Grads& d) {
                      d[0] = weight_grad(detail::recorded_plan(n, coef, num, dim), g, nullptr, sparse);
                    });
  if (t.creator()) {
    t.creator()->ids = std::move(ids);
    t.creator()->bags = std::move(bag_of);
  }
  return t;
}

namespace {

// <x, y> in float, in 16 lanes (lane j takes elements j, j + 16, ...) added
// pairwise at the end: the order depends only on n, so every ISA and thread
// count gives the same bits, and the compiler may keep the lanes in SIMD registers.
[[gnu::always_inline]] inline float lane_dot_float(const float* x, const float* y, std::size_t n) {
  float lane[16] = {};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::size_t j = 0; j < 16; ++j) lane[j] += x[i + j] * y[i + j];
  for (std::size_t j = 0; i < n; ++i, ++j) lane[j] += x[i] * y[i];
  for (std::size_t half = 8; half > 0; half /= 2)
    for (std::size_t j = 0; j < half; ++j) lane[j] += lane[j + half];
  return lane[0];
}

// The table's rows are read at random: each row is requested two of h's rows
// ahead (as EmbeddingBag's sums do), or every read would wait for memory.
constexpr std::size_t dot_ahead = 2;

// scores[p, c] = <h[p], weight[ids[p, c]]> for p in [lo, hi).  Also compiled for AVX2.
TG_ALSO_FOR_AVX2 void dot_rows(const float* h, const float* weight, const int64_t* ids, std::size_t lo,
                               std::size_t hi, std::size_t cols, std::size_t dim, float* scores) {
  for (std::size_t p = lo; p < hi; ++p) {
    if (p + dot_ahead < hi)
      for (std::size_t c = 0; c < cols; ++c)
        prefetch_row(weight + ids[(p + dot_ahead) * cols + c] * dim, dim);
    for (std::size_t c = 0; c < cols; ++c)
      scores[p * cols + c] = lane_dot_float(h + p * dim, weight + ids[p * cols + c] * dim, dim);
  }
}

// dh[p] = sum_c g[p, c] weight[ids[p, c]], c in order, for p in [lo, hi).  Also compiled for AVX2.
TG_ALSO_FOR_AVX2 void dot_rows_grad(const float* g, const float* weight, const int64_t* ids, std::size_t lo,
                                    std::size_t hi, std::size_t cols, std::size_t dim, float* dh) {
  for (std::size_t p = lo; p < hi; ++p) {
    if (p + dot_ahead < hi)
      for (std::size_t c = 0; c < cols; ++c)
        prefetch_row(weight + ids[(p + dot_ahead) * cols + c] * dim, dim);
    float* dst = dh + p * dim;
    for (std::size_t d = 0; d < dim; ++d) dst[d] = 0.0f;
    for (std::size_t c = 0; c < cols; ++c) {
      const float gc = g[p * cols + c];
      const float* row = weight + ids[p * cols + c] * dim;
      for (std::size_t d = 0; d < dim; ++d) dst[d] += gc * row[d];
    }
  }
}

}  // namespace

Tensor Embedding::dot(const Tensor& h, const Indices& ids) {
  check_weight("Embedding::dot", weight);
  const std::size_t num = num_embeddings(), dim = embedding_dim();
  if (h.dim() != 2 || h.shape()[1] != dim)
    throw std::invalid_argument("Embedding::dot: h must be [P, " + std::to_string(dim) +
                                "] for a table of dim " + std::to_string(dim) + "; got " +
                                shape_str(h.shape()));
  if (ids.dimension() != 2 || ids.shape()[0] != h.shape()[0])
    throw std::invalid_argument(
        "Embedding::dot: ids must be [P, C] with P = " + std::to_string(h.shape()[0]) + " (h's rows); got " +
        shape_str(Shape(ids.shape().begin(), ids.shape().end())));
  if (options_.max_norm || options_.padding_idx)
    throw std::invalid_argument("Embedding::dot: not for a table with max_norm or padding_idx");
  check_indices("Embedding::dot", ids, num);
  const std::size_t rows = ids.shape()[0], cols = ids.shape()[1];
  auto kept = std::make_unique<const Indices>(ids);  // kept by the tape entry: its backward reads them
  const int64_t* index = kept->data();

  // [P, dim] . [P, C, dim] -> [P, C]
  Array scores = xt::empty<float>({rows, cols});
  parallel_for(rows, kernels::grain_for(rows, rows * cols * dim), [&](std::size_t lo, std::size_t hi) {
    dot_rows(h.value().data(), weight.value().data(), index, lo, hi, cols, dim, scores.data());
  });
  Tensor t = record(
      "embedding_dot", std::move(scores), {weight, h},
      [num, dim, rows, cols, sparse = options_.sparse](const Array& g, const Node& n, Grads& d) {
        const std::span<const int64_t> index(n.ids->data(), n.ids->size());
        if (n.needs_grad(1)) {  // reads the table's rows
          Array dh = xt::empty<float>({rows, dim});
          const float* w = n.input(0).data();
          parallel_for(rows, kernels::grain_for(rows, rows * cols * dim),
                       [&](std::size_t lo, std::size_t hi) {
                         dot_rows_grad(g.data(), w, index.data(), lo, hi, cols, dim, dh.data());
                       });
          d[1] = std::move(dh);
        }
        if (n.needs_grad(0)) {
          // Entry (p, c) adds g[p, c] h[p] into row ids[p, c]: a bag
          // of one entry per score, reading h's row p with factor g[p, c].
          std::vector<std::size_t> bag_of(index.size());
          for (std::size_t k = 0; k < index.size(); ++k) bag_of[k] = k / cols;
          d[0] = weight_grad({index, bag_of, {g.data(), g.size()}, num, dim}, n.input(1), nullptr, sparse);
        }
      });
  if (t.creator()) t.creator()->ids = std::move(kept);
  return t;
}

// --------------------------------------------------------------- EmbeddingBag

namespace {

const char* mode_name(EmbeddingBagMode m) {
  return m == EmbeddingBagMode::sum ? "sum" : m == EmbeddingBagMode::mean ? "mean" : "max";
}

Shape shape_of(const Indices& a) {
  return Shape(a.shape().begin(), a.shape().end());
}

void check_per_sample_weights(EmbeddingBagMode mode, const Tensor& w, const Shape& input_shape) {
  if (mode != EmbeddingBagMode::sum)
    throw std::invalid_argument(std::string("EmbeddingBag: per_sample_weights are only supported for mode "
                                            "'sum' (got '") +
                                mode_name(mode) + "')");
  if (w.shape() != input_shape)
    throw std::invalid_argument("EmbeddingBag: per_sample_weights of shape " + shape_str(w.shape()) +
                                " for input of shape " + shape_str(input_shape));
}

// The ids as one flat array: entry k of the bags (kept by the tape entry).
template <class Ids>
Indices flat_ids(const Ids& ids) {
  Indices flat = Indices::from_shape({ids.size()});
  std::copy(ids.begin(), ids.end(), flat.begin());
  return flat;
}

// offsets [B] (or [B + 1] with include_last_offset) -> bag starts [B + 1].
// Checks PyTorch's rules: starts at 0, never decreases, stays within the input.
std::vector<std::size_t> bag_starts(const Indices& offsets, std::size_t n, bool include_last_offset) {
  if (offsets.dimension() != 1)
    throw std::invalid_argument("EmbeddingBag: offsets must be 1-D; got shape " +
                                shape_str(shape_of(offsets)));
  if (include_last_offset && offsets.size() == 0)
    throw std::invalid_argument("EmbeddingBag: include_last_offset needs at least one offset");
  if (offsets.size() > 0 && offsets(0) != 0)
    throw std::invalid_argument("EmbeddingBag: offsets[0] must be 0; got " + std::to_string(offsets(0)));
  std::vector<std::size_t> starts;
  for (std::size_t b = 0; b < offsets.size(); ++b) {
    const int64_t o = offsets(b);
    if (b > 0 && o < offsets(b - 1))
      throw std::invalid_argument("EmbeddingBag: offsets must not decrease; offsets[" + std::to_string(b) +
                                  "] = " + std::to_string(o) + " < offsets[" + std::to_string(b - 1) +
                                  "] = " + std::to_string(offsets(b - 1)));
    if (static_cast<uint64_t>(o) > n)
      throw std::out_of_range("EmbeddingBag: offsets[" + std::to_string(b) + "] = " + std::to_string(o) +
                              " is past the end of the input (" + std::to_string(n) + " indices)");
    starts.push_back(static_cast<std::size_t>(o));
  }
  if (!include_last_offset)
    starts.push_back(n);  // the last bag runs to the end
  else if (starts.back() != n)
    throw std::invalid_argument(
        "EmbeddingBag: with include_last_offset, the last offset must be the "
        "input's length " +
        std::to_string(n) + "; got " + std::to_string(starts.back()));
  return starts;
}

// A bag layer's plan: which bag each entry adds to (bag_of), with what factor (coef).
void bag_plan(std::span<const int64_t> index, const std::vector<std::size_t>& starts,
              const std::optional<Tensor>& per_sample_weights, const EmbeddingBagOptions& o,
              std::vector<std::size_t>& bag_of, std::vector<float>& coef) {
  bag_of.assign(index.size(), skip);
  coef.assign(index.size(), 0.0f);
  for (std::size_t b = 0; b + 1 < starts.size(); ++b) {
    std::size_t count = 0;  // entries that are not padding
    for (std::size_t k = starts[b]; k < starts[b + 1]; ++k)
      if (!is_padding(index[k], o.padding_idx)) {
        bag_of[k] = b;
        ++count;
      }
    for (std::size_t k = starts[b]; k < starts[b + 1]; ++k) {
      if (bag_of[k] == skip) continue;
      if (o.mode == EmbeddingBagMode::mean)
        coef[k] = 1.0f / static_cast<float>(count);
      else
        coef[k] = per_sample_weights ? per_sample_weights->value().data()[k] : 1.0f;
    }
  }
}

// sum and mean: out[bag] += coef * row, for each entry.  [n] rows -> [bags, dim]
// The rows jump around a table that can be far larger than the caches, where
// the hardware prefetcher cannot guess the next one: each row is requested 8
// entries before it is read, or every read would wait for memory.
// Also compiled for AVX2 (core/kernels/dispatch.hpp): the same bits.
TG_ALSO_FOR_AVX2 void add_bag_rows(const Plan& p, std::size_t begin, std::size_t end, const float* weight,
                                   float* out) {
  constexpr std::size_t ahead = 8;
  for (std::size_t k = begin; k < end; ++k) {
    if (k + ahead < end) prefetch_row(weight + p.index[k + ahead] * p.dim, p.dim);
    if (p.bag_of[k] == skip) continue;
    const float* row = weight + p.index[k] * p.dim;
    float* dst = out + p.bag_of[k] * p.dim;
    for (std::size_t c = 0; c < p.dim; ++c) dst[c] += p.coef[k] * row[c];
  }
}

// Bag b sums entries starts[b] to starts[b + 1] - 1 into its own output row:
// the bags are split across threads (core/kernels/parallel.hpp).
Array bag_sum(const Plan& p, const std::vector<std::size_t>& starts, const Array& weight) {
  const std::size_t bags = starts.size() - 1;
  Array out = xt::zeros<float>({bags, p.dim});
  parallel_for(bags, kernels::grain_for(bags, p.index.size() * p.dim), [&](std::size_t lo, std::size_t hi) {
    add_bag_rows(p, starts[lo], starts[hi], weight.data(), out.data());
  });
  return out;
}

// max: each output element is the largest of its bag's column (the first one
// on ties); argmax records which entry that was, skip for an empty bag (0).
Array bag_max(const Plan& p, const Array& weight, std::size_t bags, std::vector<std::size_t>& argmax) {
  Array out = xt::zeros<float>({bags, p.dim});
  argmax.assign(bags * p.dim, skip);
  for (std::size_t k = 0; k < p.index.size(); ++k) {
    if (p.bag_of[k] == skip) continue;
    const float* row = weight.data() + p.index[k] * p.dim;
    const std::size_t at = p.bag_of[k] * p.dim;
    for (std::size_t c = 0; c < p.dim; ++c)
      if (argmax[at + c] == skip || row[c] > out.data()[at + c]) {
        out.data()[at + c] = row[c];
        argmax[at + c] = k;
      }
  }
  return out;
}

// d(loss)/d(per_sample_weights[k]) = <weight row of entry k, gradient of its bag>.
Array per_sample_weights_grad(const Plan& p, const Array& weight, const Array& g,
                              const Array::shape_type& shape) {
  Array out = xt::zeros<float>(shape);
  for (std::size_t k = 0; k < p.index.size(); ++k) {
    if (p.bag_of[k] == skip) continue;
    const float* row = weight.data() + p.index[k] * p.dim;
    const float* gb = g.data() + p.bag_of[k] * p.dim;
    float dot = 0.0f;
    for (std::size_t c = 0; c < p.dim; ++c) dot += row[c] * gb[c];
    out.data()[k] = dot;
  }
  return out;
}

}  // namespace

EmbeddingBag::EmbeddingBag(std::size_t num_embeddings, std::size_t embedding_dim, EmbeddingBagOptions options,
                           Generator& gen)
    : options_(std::move(options)) {
  options_.padding_idx = normalize_padding("EmbeddingBag", options_.padding_idx, num_embeddings);
  check_norm_type("EmbeddingBag", options_.norm_type);
  weight = register_parameter(
      "weight", make_weight("EmbeddingBag", num_embeddings, embedding_dim, options_.padding_idx, gen));
}

EmbeddingBag::EmbeddingBag(Array w, EmbeddingBagOptions options, bool requires_grad)
    : options_(std::move(options)) {
  check_pretrained("EmbeddingBag", w);
  options_.padding_idx = normalize_padding("EmbeddingBag", options_.padding_idx, w.shape()[0]);
  check_norm_type("EmbeddingBag", options_.norm_type);
  weight = register_parameter("weight", Tensor(std::move(w)), requires_grad);
}

EmbeddingBag EmbeddingBag::from_pretrained(const Array& weight, EmbeddingBagOptions options, bool freeze) {
  return EmbeddingBag(weight, std::move(options), !freeze);
}

Tensor EmbeddingBag::forward(const Indices& input, const Indices& offsets,
                             const std::optional<Tensor>& per_sample_weights) {
  check_weight("EmbeddingBag", weight);
  if (input.dimension() != 1)
    throw std::invalid_argument("EmbeddingBag: with offsets, input must be 1-D; got shape " +
                                shape_str(shape_of(input)));
  std::vector<std::size_t> starts = bag_starts(offsets, input.size(), options_.include_last_offset);
  check_indices("EmbeddingBag", input, num_embeddings());
  if (per_sample_weights) check_per_sample_weights(options_.mode, *per_sample_weights, shape_of(input));
  return forward_bags(flat_ids(input), std::move(starts), per_sample_weights);
}

Tensor EmbeddingBag::forward(const Indices& input, const std::optional<Tensor>& per_sample_weights) {
  check_weight("EmbeddingBag", weight);
  if (input.dimension() != 2)
    throw std::invalid_argument("EmbeddingBag: without offsets, input must be 2-D [bags, n]; got shape " +
                                shape_str(shape_of(input)));
  check_indices("EmbeddingBag", input, num_embeddings());
  if (per_sample_weights) check_per_sample_weights(options_.mode, *per_sample_weights, shape_of(input));
  const std::size_t bags = input.shape()[0], n = input.shape()[1];
  std::vector<std::size_t> starts;
  for (std::size_t b = 0; b <= bags; ++b) starts.push_back(b * n);
  return forward_bags(flat_ids(input), std::move(starts), per_sample_weights);
}

Tensor EmbeddingBag::forward(const CsrBatch& batch) {
  check_weight("EmbeddingBag", weight);
  const std::size_t n = batch.indices.size();
  if (batch.num_cols != 0 && static_cast<uint64_t>(batch.num_cols) != num_embeddings())
    throw std::invalid_argument("EmbeddingBag: a CSR batch of " + std::to_string(batch.num_cols) +
                                " columns for a table of " + std::to_string(num_embeddings()) +
                                " rows (num_cols must be the number of rows, or 0 to skip this check)");
  if (batch.indptr.empty() || static_cast<uint64_t>(batch.indptr.back()) != n)
    throw std::invalid_argument(
        "EmbeddingBag: CSR indptr must end at the number of indices (" + std::to_string(n) + "); got " +
        (batch.indptr.empty() ? "an empty indptr" : std::to_string(batch.indptr.back())));
  Indices indptr = xt::adapt(batch.indptr, {batch.indptr.size()});
  std::vector<std::size_t> starts = bag_starts(indptr, n, /*include_last_offset=*/true);
  Indices indices = flat_ids(batch.indices);
  check_indices("EmbeddingBag", indices, num_embeddings());
  std::optional<Tensor> weights;
  if (!batch.values.empty()) {
    if (options_.mode != EmbeddingBagMode::sum)
      throw std::invalid_argument(std::string("EmbeddingBag: CSR values act as per-sample weights, only "
                                              "supported for mode 'sum' (got '") +
                                  mode_name(options_.mode) + "'); pass empty values for plain bags");
    if (batch.values.size() != n)
      throw std::invalid_argument("EmbeddingBag: CSR has " + std::to_string(batch.values.size()) +
                                  " values for " + std::to_string(n) + " indices");
    weights = Tensor(xt::adapt(batch.values, {n}));
  }
  return forward_bags(std::move(indices), std::move(starts), weights);
}

Tensor EmbeddingBag::forward_bags(Indices entries, std::vector<std::size_t> starts,
                                  const std::optional<Tensor>& per_sample_weights) {
  auto ids =
      std::make_unique<const Indices>(std::move(entries));  // kept by the tape entry: its backward reads them
  const std::span<const int64_t> index(ids->data(), ids->size());
  if (options_.max_norm)
    renorm_rows("EmbeddingBag", weight, {index.begin(), index.end()}, *options_.max_norm, options_.norm_type);
  const std::size_t bags = starts.size() - 1, num = num_embeddings(), dim = embedding_dim();
  std::vector<std::size_t> bag_of;
  std::vector<float> coef;
  bag_plan(index, starts, per_sample_weights, options_, bag_of, coef);
  const Plan p{index, bag_of, coef, num, dim};
  const bool max_mode = options_.mode == EmbeddingBagMode::max;
  std::vector<std::size_t> argmax;
  Array out = max_mode ? bag_max(p, weight.value(), bags, argmax) : bag_sum(p, starts, weight.value());

  std::vector<Tensor> inputs{weight};
  if (per_sample_weights) inputs.push_back(*per_sample_weights);
  Tensor t = record("embedding_bag", std::move(out), std::move(inputs),
                    [coef = std::move(coef), argmax = std::move(argmax), num, dim, max_mode,
                     sparse = options_.sparse](const Array& g, const Node& n, Grads& d) {
                      const Plan p = detail::recorded_plan(n, coef, num, dim);
                      if (d.size() > 1 && n.needs_grad(1))  // reads the weight's rows
                        d[1] = per_sample_weights_grad(p, n.input(0), g, n.input_shape(1));
                      if (n.needs_grad(0)) d[0] = weight_grad(p, g, max_mode ? &argmax : nullptr, sparse);
                    });
  if (t.creator()) {
    t.creator()->ids = std::move(ids);
    t.creator()->bags = std::move(bag_of);
  }
  return t;
}

}  // namespace tg::nn
