// EmbeddingBag and Embedding inputs built from fuzz bytes: the layer's options,
// then indices, offsets and per-sample weights in one of the four input forms
// ((indices, offsets), 2-D indices, CSR, Embedding's plain ids). Indices and
// offsets are mostly plausible, sometimes one past the end, negative, or any
// 64-bit value.
//
// Promises checked (nn/embedding.hpp):
//   - a call either succeeds or throws std::invalid_argument / std::out_of_range;
//     a refused call leaves the weight as it was and nothing on the tape;
//   - a successful call's output matches a plain loop over the bags (sum,
//     mean, max, padding, per-sample weights, max_norm), and backward gives
//     the weight the gradient that loop implies: a valid, coalesced SparseRows
//     (or the same values densely with sparse = false).
#include <cmath>
#include <optional>
#include <stdexcept>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "inspect/debug.hpp"
#include "fuzz_common.hpp"
#include "nn/embedding.hpp"

namespace {

using tg::nn::EmbeddingBagMode;

constexpr std::size_t max_entries = 24;

// An index for a table of `num` rows: mostly in range, sometimes `num`, a small
// negative, or any 64-bit value.
int64_t index_from(fuzz::Bytes& in, std::size_t num) {
  const uint8_t b = in.byte();
  if (b < 0xE0) return b % num;
  if (b < 0xF0) return static_cast<int64_t>(num) + (b & 3);
  if (b < 0xFE) return -1 - (b & 7);
  return in.raw64();
}

// Offsets that start at 0 and grow by 0..3, or, now and then, anything.
// (Steps wrap around in unsigned arithmetic: after a raw 64-bit value, a
// signed sum could overflow.)
std::vector<int64_t> offsets_from(fuzz::Bytes& in, std::size_t count) {
  std::vector<int64_t> out;
  uint64_t at = 0;
  for (std::size_t b = 0; b < count; ++b) {
    const uint8_t x = in.byte();
    if (x < 0xF0)
      at += b == 0 ? 0 : x % 4;
    else if (x < 0xFE)
      at += static_cast<uint64_t>(static_cast<int64_t>(x & 0x0F) - 8);  // a small step back or forward
    else
      at = static_cast<uint64_t>(in.raw64());
    out.push_back(static_cast<int64_t>(at));
  }
  return out;
}

struct Reference {
  tg::Array out;                // [bags, dim]
  tg::Array grad;               // [num, dim] for the upstream gradient g
  std::vector<float> psw_grad;  // one per entry: <its weight row, its bag's g>
};

bool close(const tg::Array& a, const tg::Array& b) {
  if (a.shape() != b.shape()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a.data()[i] - b.data()[i]) <= 1e-4f * (1.0f + std::abs(b.data()[i])))) return false;
  return true;
}

// The layer's documented behaviour, one entry at a time. starts has bags + 1 entries.
Reference bag_reference(const tg::Array& w, const std::vector<int64_t>& idx,
                        const std::vector<std::size_t>& starts, const std::vector<float>* psw,
                        EmbeddingBagMode mode, std::optional<int64_t> pad, const tg::Array& g) {
  const std::size_t dim = w.shape()[1], bags = starts.size() - 1;
  Reference r{xt::zeros<float>({bags, dim}), xt::zeros<float>(w.shape()),
              std::vector<float>(idx.size(), 0.0f)};
  for (std::size_t b = 0; b < bags; ++b) {
    std::vector<std::size_t> members;
    for (std::size_t k = starts[b]; k < starts[b + 1]; ++k)
      if (!pad || idx[k] != *pad) members.push_back(k);
    for (std::size_t c = 0; c < dim; ++c) {
      if (mode == EmbeddingBagMode::max) {
        if (members.empty()) continue;
        std::size_t best = members[0];
        for (std::size_t k : members)
          if (w(idx[k], c) > w(idx[best], c)) best = k;
        r.out(b, c) = w(idx[best], c);
        r.grad(idx[best], c) += g(b, c);
        continue;
      }
      for (std::size_t k : members) {
        const float coef = mode == EmbeddingBagMode::mean ? 1.0f / members.size() : psw ? (*psw)[k] : 1.0f;
        r.out(b, c) += coef * w(idx[k], c);
        r.grad(idx[k], c) += coef * g(b, c);
        r.psw_grad[k] += w(idx[k], c) * g(b, c);
      }
    }
  }
  return r;
}

void check_weight_grad(const tg::Tensor& weight, bool sparse, const tg::Array& expected) {
  const tg::Grad& got = weight.grad();
  const tg::Shape shape = weight.shape();
  if (got.empty()) {
    FUZZ_EXPECT(xt::all(xt::equal(expected, 0.0f)), "no gradient where one was expected");
    return;
  }
  if (sparse) {
    FUZZ_EXPECT(got.is_sparse(), "sparse = true gave a dense gradient");
    got.sparse().check("fuzz");  // sorted, unique, in range; throws otherwise
    FUZZ_EXPECT(got.sparse().num_rows == shape[0] && got.sparse().cols() == shape[1],
                "SparseRows of the wrong shape");
  } else {
    FUZZ_EXPECT(got.is_dense(), "sparse = false gave a SparseRows gradient");
  }
  FUZZ_EXPECT(close(got.to_dense(shape), expected), "weight gradient differs from the reference");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  fuzz::Bytes in(data, size);
  const std::size_t num = 1 + in.byte() % 8, dim = 1 + in.byte() % 4;
  const uint8_t flags = in.byte();
  const int form = in.byte() % 4;  // 0: (indices, offsets), 1: 2-D, 2: CSR, 3: Embedding
  const auto mode = static_cast<EmbeddingBagMode>((flags & 3) % 3);
  const bool include_last = flags & 4, sparse = flags & 8, with_psw = flags & 16, psw_grad = flags & 32;
  const bool max_norm = flags & 64;
  std::optional<int64_t> padding;
  if (flags & 128) padding = static_cast<int8_t>(in.byte()) % 10;

  const std::size_t n = in.byte() % max_entries;
  std::vector<int64_t> idx;
  for (std::size_t k = 0; k < n; ++k) idx.push_back(index_from(in, num));
  const std::size_t count = in.byte() % 8;
  std::vector<int64_t> offsets = offsets_from(in, count);
  const uint8_t psw_len_byte = in.byte();
  const std::size_t psw_len = psw_len_byte < 0xC0 ? n : psw_len_byte % max_entries;
  std::vector<float> psw;
  for (std::size_t k = 0; k < psw_len; ++k) psw.push_back((static_cast<int>(in.byte()) - 128) / 16.0f);
  const std::size_t rows2d = 1 + in.byte() % 4;  // for the 2-D form

  tg::Generator gen(1);
  std::optional<tg::nn::EmbeddingBag> bag;
  std::optional<tg::nn::Embedding> emb;
  try {
    if (form == 3)
      emb.emplace(num, dim,
                  tg::nn::EmbeddingOptions{.padding_idx = padding,
                                           .max_norm = max_norm ? std::optional<float>(0.8f) : std::nullopt,
                                           .sparse = sparse},
                  gen);
    else
      bag.emplace(
          num, dim,
          tg::nn::EmbeddingBagOptions{.mode = mode,
                                      .include_last_offset = include_last,
                                      .padding_idx = padding,
                                      .max_norm = max_norm ? std::optional<float>(0.8f) : std::nullopt,
                                      .sparse = sparse},
          gen);
  } catch (const std::invalid_argument&) {
    return 0;  // padding_idx out of range: refused at construction, as documented
  }
  tg::Tensor& weight = form == 3 ? emb->weight : bag->weight;
  const tg::Array before = weight.value();
  const std::optional<int64_t> pad = form == 3 ? emb->options().padding_idx : bag->options().padding_idx;

  // The call under test, and what a plain loop says it should give.
  tg::Tensor out;
  std::vector<std::size_t> starts;    // bags + 1
  std::optional<tg::Tensor> weights;  // forms 0 and 1; CSR carries its own values
  if (with_psw && (form == 0 || form == 1)) {
    tg::Shape s{psw_len};
    if (form == 1 && psw_len % rows2d == 0) s = {rows2d, psw_len / rows2d};
    weights = tg::Tensor(tg::Array(xt::adapt(psw, s)), psw_grad);
  }
  try {
    if (form == 0) {
      out = (*bag)(tg::Indices(xt::adapt(idx, {n})), tg::Indices(xt::adapt(offsets, {count})), weights);
      starts.assign(offsets.begin(), offsets.end());
      if (!include_last) starts.push_back(n);
    } else if (form == 1) {
      tg::Shape s{rows2d, n / rows2d};
      idx.resize(rows2d * (n / rows2d));
      out = (*bag)(tg::Indices(xt::adapt(idx, s)), weights);
      for (std::size_t b = 0; b <= rows2d; ++b) starts.push_back(b * (n / rows2d));
    } else if (form == 2) {
      tg::CsrBatch csr{offsets, idx, with_psw ? psw : std::vector<float>{}};
      out = (*bag)(csr);
      starts.assign(offsets.begin(), offsets.end());
    } else {
      out = (*emb)(tg::Indices(xt::adapt(idx, {n})));
      for (std::size_t b = 0; b <= n; ++b) starts.push_back(b);
    }
  } catch (const std::logic_error& e) {  // std::invalid_argument, std::out_of_range
    FUZZ_EXPECT(weight.value() == before, std::string("a refused call changed the weight: ") + e.what());
    FUZZ_EXPECT(tg::Tape::current().live_count() == 0, "a refused call left entries on the tape");
    return 0;
  } catch (const std::exception& e) {
    fuzz::broken(std::string("unexpected exception type: ") + e.what());
  }

  // Accepted: the input was valid, so the plain loop can index freely.
  const std::size_t bags = starts.size() - 1;
  FUZZ_EXPECT(out.shape() == (form == 3 ? tg::Shape{n, dim} : tg::Shape{bags, dim}), "output shape");
  for (int64_t i : idx)
    FUZZ_EXPECT(i >= 0 && static_cast<std::size_t>(i) < num, "an out-of-range index was accepted");
  for (std::size_t b = 0; b < bags; ++b)
    FUZZ_EXPECT(starts[b] <= starts[b + 1] && starts[b + 1] <= n, "bad offsets accepted");

  tg::Array g = xt::zeros<float>({bags, dim});
  for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = 1.0f + 0.25f * static_cast<float>(i % 7);
  // Weights in play: the per_sample_weights tensor, or non-empty CSR values
  // (empty values mean plain bags).
  const bool weighted = weights.has_value() || (form == 2 && with_psw && !psw.empty());
  const std::vector<float>* psw_used = weighted ? &psw : nullptr;
  const EmbeddingBagMode ref_mode = form == 3 ? EmbeddingBagMode::sum : mode;
  // max_norm rewrote the rows it read before the lookup; the layer's weight now holds them.
  const Reference ref = bag_reference(weight.value(), idx, starts, psw_used, ref_mode, pad, g);
  FUZZ_EXPECT(close(out.value(), ref.out), "output differs from the reference");

  out.backward(g);
  check_weight_grad(weight, sparse, ref.grad);
  if (weights && psw_grad) {
    const tg::Array got = weights->grad_dense();
    const tg::Array want = xt::adapt(ref.psw_grad, weights->shape());
    FUZZ_EXPECT(close(got, want), "per_sample_weights gradient differs from the reference");
  }
  out = tg::Tensor();
  FUZZ_EXPECT(tg::Tape::current().live_count() == 0, "entries left on the tape after backward");
  return 0;
}
