// Optimizer: the base of SGD and Adam.
//
// An optimizer holds handles to the parameters it updates (copies of the Tensor
// handles, so it sees the same values and gradient slots as the model) and keeps
// its per-parameter state in vectors parallel to them: state_[i] belongs to
// params_[i].
//
// One training step:
//
//   optimizer.zero_grad();   // every gradient slot becomes empty
//   loss.backward();         // fills the slots (dense arrays or SparseRows)
//   optimizer.step();        // updates the values in place
//
// step() skips a parameter whose gradient slot is empty, as PyTorch skips a
// parameter whose .grad is None. Before updating anything it checks every
// gradient against its parameter, so a bad gradient throws and leaves all values
// and all optimizer state as they were.
//
// Rows. A parameter of shape [n0, n1, ...] is updated as n0 rows of n1*n2*...
// values; a 0-d or 1-d parameter is a single row. A dense gradient covers every
// row; a SparseRows gradient (from an Embedding, say) covers only its listed rows,
// and the optimizers touch nothing else. Dense and sparse gradients go through the
// same per-row code, which is why a sparse gradient listing every row gives
// exactly the dense result.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "../core/grad.hpp"
#include "../core/tensor.hpp"

namespace tg::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;

  // Empties every gradient slot (PyTorch's zero_grad(set_to_none=True)): a
  // parameter that gets no gradient before the next step() is then skipped.
  void zero_grad();

  const std::vector<Tensor>& parameters() const { return params_; }

  // Bytes held by the optimizer's state (momentum buffers, moments, flags).
  virtual std::size_t state_bytes() const = 0;

 protected:
  // Throws std::invalid_argument, naming `name` and the parameter's position,
  // for a parameter given twice, a non-leaf, or one that does not require grad.
  Optimizer(std::vector<Tensor> params, std::string name);

  // Throws std::invalid_argument unless every non-empty gradient fits its
  // parameter. step() calls it before touching anything.
  void check_grads() const;

  // A [rows, cols] state array of zeros (momentum, moments). A sparse gradient
  // updates it at scattered rows, so it asks for 2 MB pages (advise_huge_pages).
  static xt::xtensor<float, 2> zero_state(std::size_t rows, std::size_t cols);

  // The row view described at the top of this file.
  static std::size_t num_rows(const Shape& shape);
  static std::size_t row_size(const Shape& shape);

  // Calls update(r, g) for every row r the gradient covers, in increasing order;
  // g points at that row's `cols` gradient values. The gradient has passed check_grads().
  // `touched` are the [rows, cols] arrays the update reads and writes (values,
  // moments; null entries are skipped). A sparse gradient's rows are scattered
  // over a table that can be far larger than the caches, so their rows in these
  // arrays are requested a few rows before their update.
  template <std::size_t N, class Update>
  static void for_each_row(const Grad& grad, std::size_t rows, std::size_t cols,
                           const std::array<float*, N>& touched, Update update) {
    if (grad.is_dense()) {
      const float* g = grad.dense().data();
      for (std::size_t r = 0; r < rows; ++r) update(r, g + r * cols);
    } else if (grad.is_sparse()) {
      const SparseRows& s = grad.sparse();
      constexpr std::size_t ahead = 4;
      for (std::size_t i = 0; i < s.rows.size(); ++i) {
        if (i + ahead < s.rows.size()) {
          const std::size_t next = static_cast<std::size_t>(s.rows[i + ahead]);
          for (const float* a : touched)
            if (a != nullptr) prefetch_row(a + next * cols, cols);
        }
        update(static_cast<std::size_t>(s.rows[i]), s.values.data() + i * cols);
      }
    }
  }

  std::vector<Tensor> params_;
  std::string name_;  // "SGD", "Adam", "AdamW": used in error messages
};

}  // namespace tg::optim
