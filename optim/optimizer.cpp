#include "optimizer.hpp"

#include <algorithm>
#include <stdexcept>

namespace tg::optim {

Optimizer::Optimizer(std::vector<Tensor> params, std::string name)
    : params_(std::move(params)), name_(std::move(name)) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::string which =
        name_ + ": parameter " + std::to_string(i) + " (shape " + shape_str(params_[i].shape()) + ")";
    if (!params_[i].is_leaf())
      throw std::invalid_argument(which + " is not a leaf; optimize the tensors you created");
    if (!params_[i].requires_grad()) throw std::invalid_argument(which + " does not require grad");
    for (std::size_t j = 0; j < i; ++j)
      if (params_[i].is_same(params_[j]))
        throw std::invalid_argument(which + " is the same tensor as parameter " + std::to_string(j));
  }
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

void Optimizer::check_grads() const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Grad& g = params_[i].grad();
    const Shape shape = params_[i].shape();
    const std::string which = name_ + ".step: parameter " + std::to_string(i);
    if (g.is_dense()) {
      const Shape gs(g.dense().shape().begin(), g.dense().shape().end());
      if (gs != shape)
        throw std::invalid_argument(which + " has shape " + shape_str(shape) +
                                    " but its gradient has shape " + shape_str(gs));
    } else if (g.is_sparse()) {
      const SparseRows& s = g.sparse();
      const Shape gs{s.num_rows, s.values.shape()[1]};
      if (gs != shape)
        throw std::invalid_argument(which + " has shape " + shape_str(shape) +
                                    " but its SparseRows gradient has shape " + shape_str(gs));
      s.check(which.c_str());  // rows sorted, unique, in range; one values row per row
    }
  }
}

xt::xtensor<float, 2> Optimizer::zero_state(std::size_t rows, std::size_t cols) {
  xt::xtensor<float, 2> a = xt::empty<float>({rows, cols});
  advise_huge_pages(a.data(), a.size());  // before the fill touches the pages
  std::fill(a.begin(), a.end(), 0.0f);
  return a;
}

std::size_t Optimizer::num_rows(const Shape& shape) {
  return shape.size() >= 2 ? shape[0] : 1;
}

std::size_t Optimizer::row_size(const Shape& shape) {
  std::size_t n = 1;
  for (std::size_t d = shape.size() >= 2 ? 1 : 0; d < shape.size(); ++d) n *= shape[d];
  return n;
}

}  // namespace tg::optim
