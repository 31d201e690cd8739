// The distributed API on MPI: init and finalize, ranks, and sync_gradients (one
// MPI_Allreduce for the dense gradients, two MPI_Allgatherv for the sparse rows' ids and values).
// Only the C API: the deprecated C++ bindings are not used (and warn).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <bit>
#include <climits>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "collective.hpp"
#include "merge.hpp"

namespace tg::distributed {

namespace {

void check_initialized(const char* where) {
  if (!is_initialized())
    throw std::logic_error(std::string(where) + ": call tg::distributed::init(argc, argv) first");
}

int as_count(std::size_t n, const char* what, const char* where = "sync_gradients") {  // MPI counts are ints
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument(std::string(where) + ": " + what + " of " + std::to_string(n) +
                                " elements is more than one MPI call takes (" + std::to_string(INT_MAX) +
                                ")");
  return static_cast<int>(n);
}

// What each rank says about one parameter's gradient before anything is sent.
enum Kind : int64_t { empty = 0, sparse = 1, dense = 2 };
struct Entry {
  int64_t kind, numel, rows, nnz;  // rows: the first dim (1 for a 0-d or 1-d tensor); nnz: sparse rows held
};

Entry describe(const Tensor& p) {
  const Grad& g = p.grad();
  const int64_t numel = static_cast<int64_t>(p.numel());
  const int64_t rows = p.dim() >= 2 ? static_cast<int64_t>(p.shape()[0]) : 1;
  if (g.is_sparse()) return {sparse, numel, rows, static_cast<int64_t>(g.sparse().nnz_rows())};
  return {g.is_dense() ? dense : empty, numel, rows, 0};
}

std::string name_of(const std::vector<Tensor>& parameters, std::size_t i) {
  const std::string& n = parameters[i].name();
  return "parameter " + std::to_string(i) + (n.empty() ? "" : " (" + n + ")");
}

}  // namespace

bool is_available() {
  return true;
}

void init(int& argc, char**& argv) {
  int done = 0;
  MPI_Initialized(&done);
  if (done) throw std::logic_error("tg::distributed::init: called twice");
  // Worker threads (the thread pool) never call MPI; only the main thread does.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
}

void finalize() {
  int done = 0;
  MPI_Finalized(&done);
  if (is_initialized() && !done) MPI_Finalize();
}

bool is_initialized() {
  int started = 0, done = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&done);
  return started && !done;
}

int rank() {
  if (!is_initialized()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  if (!is_initialized()) return 1;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (is_initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

Session::~Session() {
  if (std::uncaught_exceptions() > 0 && world_size() > 1) {
    std::fprintf(stderr, "tg::distributed: rank %d of %d is leaving with an exception; stopping every rank\n",
                 rank(), world_size());
    abort(1);
  }
  finalize();
}

void all_reduce(std::span<double> values) {
  check_initialized("tg::distributed::all_reduce");
  MPI_Allreduce(MPI_IN_PLACE, values.data(), as_count(values.size(), "the values", "all_reduce"), MPI_DOUBLE,
                MPI_SUM, MPI_COMM_WORLD);
}

void barrier() {
  check_initialized("tg::distributed::barrier");
  MPI_Barrier(MPI_COMM_WORLD);
}

std::vector<std::byte> all_gather_bytes(std::span<const std::byte> mine, std::vector<std::size_t>* counts,
                                        const char* caller) {
  check_initialized(caller);
  const int world = world_size();
  const int64_t size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(world);
  MPI_Allgather(&size, 1, MPI_INT64_T, sizes.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
  std::vector<int> count(world), at(world);
  std::size_t total = 0;
  for (int r = 0; r < world; ++r) {
    count[r] = as_count(static_cast<std::size_t>(sizes[r]), "a rank's bytes", caller);
    at[r] = as_count(total, "the bytes", caller);
    total += static_cast<std::size_t>(sizes[r]);
  }
  as_count(total, "the bytes", caller);
  std::vector<std::byte> all(total);
  MPI_Allgatherv(mine.data(), count[rank()], MPI_BYTE, all.data(), count.data(), at.data(), MPI_BYTE,
                 MPI_COMM_WORLD);
  if (counts) counts->assign(sizes.begin(), sizes.end());
  return all;
}

SyncStats sync_gradients(const std::vector<Tensor>& parameters, double samples) {
  check_initialized("sync_gradients");
  if (!(samples >= 0))
    throw std::invalid_argument("sync_gradients: samples must be >= 0, got " + std::to_string(samples));
  const int world = world_size(), me = rank();
  const std::size_t n = parameters.size();
  SyncStats stats;
  if (world == 1) return stats;  // the mean of one gradient is itself

  // 1. Every rank's parameter count and samples; then every rank's description
  //    of every gradient. Each rank checks the same gathered data, so either all
  //    throw or none does.
  int64_t mine[2] = {static_cast<int64_t>(n), std::bit_cast<int64_t>(samples)};
  std::vector<int64_t> heads(2 * world);
  MPI_Allgather(mine, 2, MPI_INT64_T, heads.data(), 2, MPI_INT64_T, MPI_COMM_WORLD);
  double total = 0;
  std::vector<double> share(world);
  for (int r = 0; r < world; ++r) {
    if (heads[2 * r] != static_cast<int64_t>(n))
      throw std::invalid_argument("sync_gradients: rank " + std::to_string(me) + " passes " +
                                  std::to_string(n) + " parameters, rank " + std::to_string(r) + " " +
                                  std::to_string(heads[2 * r]));
    share[r] = std::bit_cast<double>(heads[2 * r + 1]);
    total += share[r];
  }
  std::vector<Entry> local(n), all(n * world);
  for (std::size_t i = 0; i < n; ++i) local[i] = describe(parameters[i]);
  MPI_Allgather(local.data(), as_count(4 * n, "the description"), MPI_INT64_T, all.data(),
                as_count(4 * n, "the description"), MPI_INT64_T, MPI_COMM_WORLD);
  stats.header_bytes = sizeof mine + n * sizeof(Entry);
  std::vector<int64_t> kind(n, empty);  // what each gradient becomes: the largest kind any rank holds
  for (std::size_t i = 0; i < n; ++i)
    for (int r = 0; r < world; ++r) {
      const Entry& e = all[r * n + i];
      if (e.numel != local[i].numel || e.rows != local[i].rows)
        throw std::invalid_argument(
            "sync_gradients: " + name_of(parameters, i) + " has " + std::to_string(local[i].numel) +
            " values in " + std::to_string(local[i].rows) + " rows on rank " + std::to_string(me) + ", " +
            std::to_string(e.numel) + " in " + std::to_string(e.rows) + " on rank " + std::to_string(r));
      kind[i] = std::max(kind[i], e.kind);
    }
  bool any = false;
  for (int64_t k : kind) any = any || k != empty;
  if (!any) return stats;
  if (!(total > 0)) throw std::invalid_argument("sync_gradients: the ranks' samples add up to 0");
  std::vector<float> weight(world);  // rank r's gradient counts weight[r] times
  for (int r = 0; r < world; ++r) weight[r] = static_cast<float>(share[r] / total);

  // 2. Dense gradients: weight[me] * g of each, in one buffer, summed by one MPI_Allreduce.
  std::size_t dense_values = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (kind[i] == dense) dense_values += parameters[i].numel();
  if (dense_values > 0) {
    std::vector<float> buffer(dense_values, 0.0f);
    std::size_t at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (kind[i] != dense) continue;
      const Grad& g = parameters[i].grad();
      if (g.is_dense()) {
        const float* src = g.dense().data();
        for (std::size_t k = 0; k < g.dense().size(); ++k) buffer[at + k] = weight[me] * src[k];
      } else if (g.is_sparse()) {  // sparse here, dense on another rank: dense + sparse is dense
        const SparseRows& s = g.sparse();
        for (std::size_t k = 0; k < s.rows.size(); ++k)
          for (std::size_t c = 0; c < s.cols(); ++c)
            buffer[at + s.rows[k] * s.cols() + c] = weight[me] * s.values(k, c);
      }
      at += parameters[i].numel();
    }
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), as_count(dense_values, "the dense buffer"), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (kind[i] != dense) continue;
      Tensor p = parameters[i];
      Array g = Array::from_shape(p.shape());
      std::copy(buffer.begin() + at, buffer.begin() + at + p.numel(), g.data());
      p.grad_mut() = Grad(std::move(g));
      at += p.numel();
    }
    stats.dense_values = dense_values;
    stats.dense_bytes = dense_values * sizeof(float);
  }

  // 3. Sparse gradients: every rank's row ids (one MPI_Allgatherv) and rows
  //    (another), for all sparse parameters at once, each rank's part in
  //    parameter order; then each parameter's rows are merged in rank order,
  //    read where they arrived.
  std::vector<int> id_count(world), id_at(world), value_count(world), value_at(world);
  std::size_t ids_total = 0, values_total = 0;
  for (int r = 0; r < world; ++r) {
    std::size_t ids = 0, values = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (kind[i] == sparse) {
        const Entry& e = all[r * n + i];
        ids += e.nnz;
        values += e.nnz * (e.numel / e.rows);
      }
    id_count[r] = as_count(ids, "the sparse rows' ids");
    value_count[r] = as_count(values, "the sparse rows' values");
    id_at[r] = as_count(ids_total, "the sparse rows' ids");
    value_at[r] = as_count(values_total, "the sparse rows' values");
    ids_total += ids;
    values_total += values;
  }
  as_count(ids_total, "the sparse rows' ids");
  as_count(values_total, "the sparse rows' values");
  if (ids_total == 0) {
    for (std::size_t i = 0; i < n; ++i)  // sparse with no rows on every rank: as it is
      if (kind[i] == sparse && !parameters[i].grad().is_sparse()) {
        Tensor p = parameters[i];
        const std::size_t cols = p.numel() / local[i].rows;
        p.grad_mut() = Grad(SparseRows{{}, xt::zeros<float>({std::size_t{0}, cols}), p.shape()[0]});
      }
    return stats;
  }
  // This rank's part: a single sparse gradient is sent from where it lies;
  // several are put end to end first.
  std::vector<const SparseRows*> held;
  for (std::size_t i = 0; i < n; ++i)
    if (kind[i] == sparse && parameters[i].grad().is_sparse()) held.push_back(&parameters[i].grad().sparse());
  std::vector<int64_t> my_ids;
  std::vector<float> my_values;
  if (held.size() != 1)
    for (const SparseRows* s : held) {
      my_ids.insert(my_ids.end(), s->rows.begin(), s->rows.end());
      my_values.insert(my_values.end(), s->values.begin(), s->values.end());
    }
  const int64_t* send_ids = held.size() == 1 ? held[0]->rows.data() : my_ids.data();
  const float* send_values = held.size() == 1 ? held[0]->values.data() : my_values.data();
  // Received into uninitialised buffers: every element is written by the call.
  const auto ids = std::make_unique_for_overwrite<int64_t[]>(ids_total);
  const auto values = std::make_unique_for_overwrite<float[]>(values_total);
  MPI_Allgatherv(send_ids, id_count[me], MPI_INT64_T, ids.get(), id_count.data(), id_at.data(), MPI_INT64_T,
                 MPI_COMM_WORLD);
  MPI_Allgatherv(send_values, value_count[me], MPI_FLOAT, values.get(), value_count.data(), value_at.data(),
                 MPI_FLOAT, MPI_COMM_WORLD);
  stats.sparse_rows_sent = static_cast<std::size_t>(id_count[me]);
  stats.sparse_bytes_sent = id_count[me] * sizeof(int64_t) + value_count[me] * sizeof(float);
  stats.sparse_bytes_received =
      ids_total * sizeof(int64_t) + values_total * sizeof(float) - stats.sparse_bytes_sent;

  std::vector<std::size_t> id_next(id_at.begin(), id_at.end()), value_next(value_at.begin(), value_at.end());
  std::vector<RankRows> parts(world);
  for (std::size_t i = 0; i < n; ++i) {
    if (kind[i] != sparse) continue;
    Tensor p = parameters[i];
    const std::size_t table_rows = static_cast<std::size_t>(local[i].rows);
    const std::size_t cols = p.numel() / table_rows;
    for (int r = 0; r < world; ++r) {  // rank r's rows of parameter i
      const std::size_t nnz = static_cast<std::size_t>(all[r * n + i].nnz);
      parts[r] = {{ids.get() + id_next[r], nnz}, values.get() + value_next[r]};
      id_next[r] += nnz;
      value_next[r] += nnz * cols;
    }
    SparseRows merged = merge_rows(parts, weight, table_rows, cols);
    stats.sparse_rows += merged.nnz_rows();
    p.grad_mut() = Grad(std::move(merged));
  }
  return stats;
}

}  // namespace tg::distributed
