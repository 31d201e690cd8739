// The gradient slot of a tensor: empty, a dense array, or SparseRows.
//
// Accumulation rules (Grad::accumulate):
//   empty  + x      -> x
//   dense  + dense  -> dense (shapes must match)
//   dense  + sparse -> dense (the sparse rows are added into the dense array)
//   sparse + dense  -> dense
//   sparse + sparse -> sparse, merged and still coalesced (sorted unique rows)
#pragma once

#include <iosfwd>
#include <span>
#include <variant>

#include "sparse_rows.hpp"

namespace tg {

class Grad {
 public:
  Grad() = default;
  Grad(Array g) : slot_(std::move(g)) {}  // NOLINT: a dense gradient is a Grad
  // Checks the SparseRows invariant (core/sparse_rows.hpp), once: nothing that
  // reads a Grad checks it again.
  Grad(SparseRows g);  // NOLINT
  template <class E>   // an xtensor expression, evaluated: `d[0] = g * y;`
  Grad(const xt::xexpression<E>& e) : slot_(Array(e)) {}

  bool empty() const { return std::holds_alternative<std::monostate>(slot_); }
  bool is_dense() const { return std::holds_alternative<Array>(slot_); }
  bool is_sparse() const { return std::holds_alternative<SparseRows>(slot_); }
  const Array& dense() const;        // throws unless is_dense()
  const SparseRows& sparse() const;  // throws unless is_sparse()
  Array& dense_mut();                // the dense array, to move from or write; throws unless is_dense()
  // The values it holds (all of a dense array, the listed rows of SparseRows),
  // to scale in place (clip_grad_norm_). Neither the shape nor the rows change.
  std::span<float> values_mut();
  Array::shape_type shape() const;  // of the tensor it belongs to; [] when empty
  bool has_shape(std::span<const std::size_t> shape) const;

  // Adds g. `shape` is the shape of the tensor this gradient belongs to: g and
  // what is held must both have it (std::invalid_argument). Hands over g's buffer.
  // (Named so that it is not read as the op tg::add, which records.)
  void accumulate(Grad&& g, std::span<const std::size_t> shape);
  [[deprecated("Grad::add is now Grad::accumulate")]] void add(Grad&& g, std::span<const std::size_t> shape) {
    accumulate(std::move(g), shape);
  }

  Array to_dense(const Shape& shape) const;  // zeros when empty
  std::size_t nbytes() const;
  void clear() { slot_ = std::monostate{}; }

 private:
  std::variant<std::monostate, Array, SparseRows> slot_;
};

// std::cout << t.grad(): a dense gradient prints as its Array, SparseRows as
// they do, and an empty slot as "None" (what Python prints for a tensor's
// .grad before backward()).
std::ostream& operator<<(std::ostream& os, const Grad& g);

}  // namespace tg
