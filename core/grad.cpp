// The gradient slot: empty, a dense array or SparseRows, and how shares add up.
#include "grad.hpp"

#include <algorithm>
#include <stdexcept>

namespace tg {

Grad::Grad(SparseRows g) {
  g.check("Grad");
  slot_ = std::move(g);
}

const Array& Grad::dense() const {
  if (!is_dense()) throw std::logic_error("Grad::dense: the gradient is not a dense array");
  return std::get<Array>(slot_);
}
Array& Grad::dense_mut() {
  if (!is_dense()) throw std::logic_error("Grad::dense_mut: the gradient is not a dense array");
  return std::get<Array>(slot_);
}

const SparseRows& Grad::sparse() const {
  if (!is_sparse()) throw std::logic_error("Grad::sparse: the gradient is not SparseRows");
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
  if (is_dense()) return std::ranges::equal(dense().shape(), shape);
  if (is_sparse()) return shape.size() == 2 && shape[0] == sparse().num_rows && shape[1] == sparse().cols();
  return shape.empty();
}

void Grad::accumulate(Grad&& g, std::span<const std::size_t> shape) {
  if (!g.has_shape(shape))
    throw std::invalid_argument(std::string("accumulate_grad: ") + (g.is_sparse() ? "SparseRows " : "") +
                                "gradient of shape " + shape_str(g.shape()) + " for a tensor of shape " +
                                shape_str(shape));
  if (!empty() && !has_shape(shape))  // an in-place write changed the tensor's shape since
    throw std::invalid_argument("accumulate_grad: the gradient held has shape " + shape_str(this->shape()) +
                                " but the tensor now has shape " + shape_str(shape) +
                                " (changed in place?); call zero_grad() first");
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
