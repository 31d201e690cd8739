// The gradient slot: empty, a dense array or SparseRows, and how shares add up.
#include "grad.hpp"

#include <algorithm>

#include "check.hpp"

namespace tg {

Grad::Grad(SparseRows g) {
  g.check("Grad");
  slot_ = std::move(g);
}

const Array& Grad::dense() const {
  check<std::logic_error>(is_dense(), "Grad::dense: the gradient is not a dense array");
  return std::get<Array>(slot_);
}
Array& Grad::dense_mut() {
  check<std::logic_error>(is_dense(), "Grad::dense_mut: the gradient is not a dense array");
  return std::get<Array>(slot_);
}

const SparseRows& Grad::sparse() const {
  check<std::logic_error>(is_sparse(), "Grad::sparse: the gradient is not SparseRows");
  return std::get<SparseRows>(slot_);
}

std::span<float> Grad::values_mut() {
  if (auto* a = std::get_if<Array>(&slot_)) return {a->data(), a->size()};
  if (auto* s = std::get_if<SparseRows>(&slot_)) return {s->values.data(), s->values.size()};
  return {};
}

Array::shape_type Grad::shape() const {
  if (is_dense()) return dense().shape();
  if (is_sparse()) return {sparse().num_rows, sparse().cols()};
  return {};
}

bool Grad::has_shape(std::span<const std::size_t> shape) const {
  if (const Array* a = std::get_if<Array>(&slot_)) return std::ranges::equal(a->shape(), shape);  // no copy
  return std::ranges::equal(this->shape(), shape);
}

void Grad::accumulate(Grad&& g, std::span<const std::size_t> shape) {
  // if-throw, not check(): the messages' shapes are built only when they are needed.
  if (!g.has_shape(shape))
    throw std::invalid_argument(message("accumulate_grad: ", g.is_sparse() ? "SparseRows " : "",
                                        "gradient of shape ", g.shape(), " for a tensor of shape ", shape));
  if (!empty() && !has_shape(shape))
    throw std::invalid_argument(message("accumulate_grad: the gradient held has shape ", this->shape(),
                                        " but the tensor now has shape ", shape,
                                        " (changed in place?); call zero_grad() first"));
  if (empty())
    *this = std::move(g);
  else if (is_dense() && g.is_dense())
    std::get<Array>(slot_) += g.dense();
  else if (is_sparse() && g.is_sparse())
    slot_ = merge(sparse(), g.sparse());
  else if (is_dense())  // dense + sparse -> dense: add the rows in place
    g.sparse().add_to(std::get<Array>(slot_).data());
  else {  // sparse + dense -> dense
    Array sum = std::move(std::get<Array>(g.slot_));
    sparse().add_to(sum.data());
    slot_ = std::move(sum);
  }
}

Array Grad::to_dense(const Shape& shape) const {
  if (is_dense()) return dense();
  if (is_sparse()) return sparse().to_dense();
  return xt::zeros<float>(shape);
}

std::size_t Grad::nbytes() const {
  if (is_dense()) return dense().size() * sizeof(float);
  if (is_sparse()) return sparse().nbytes();
  return 0;
}

}  // namespace tg
