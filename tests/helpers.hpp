// Shared by the test files: reference numbers from PyTorch (and the modules and
// optimizers they describe), and float comparisons.
//
// Reference files live in tests/data/*.json and are written by the scripts in
// tests/tools/ (run with Debian's python3-torch). An array is stored as
// {"shape": [2, 3], "data": [...]} in row-major order.
#pragma once

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtensor/xarray.hpp>

#include <tapegrad/core/grad.hpp>
#include <tapegrad/inspect/gradcheck.hpp>
#include <tapegrad/core/kernels/parallel.hpp>
#include <tapegrad/core/tensor.hpp>
#include <tapegrad/nn/module.hpp>
#include <tapegrad/optim/adam.hpp>
#include <tapegrad/optim/sgd.hpp>

namespace tg::test {

// Built with AddressSanitizer (gcc's -fsanitize=address, or clang's).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool address_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool address_sanitizer = true;
#else
constexpr bool address_sanitizer = false;
#endif
#else
constexpr bool address_sanitizer = false;
#endif

inline std::string source_path(const std::string& relative) {
  return std::string(TAPEGRAD_SOURCE_DIR) + "/" + relative;
}

// A fresh directory under the system's temp dir, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int count = 0;
    path = std::filesystem::temp_directory_path() /
           ("tapegrad_test_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// A whole file as bytes ("" when it cannot be read), and bytes written to one.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Runs a shell command as a user would, capturing stdout and stderr together.
struct CommandResult {
  int status = -1;  // exit status; -1 when killed by a signal
  std::string output;
};
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  REQUIRE_MESSAGE(p != nullptr, "cannot run: " << command);
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int raw = pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// The path of an example program in the build tree.
inline std::string example_path(const std::string& name) {
  return std::string(TAPEGRAD_BUILD_DIR) + "/examples/" + name;
}

// Loads tests/data/<name>.json once per process.
inline const nlohmann::json& reference(const std::string& name) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::ifstream in(source_path("tests/data/" + name + ".json"));
    REQUIRE_MESSAGE(in.good(), "missing reference file tests/data/" << name << ".json");
    it = cache.emplace(name, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

inline Array to_array(const nlohmann::json& j) {
  Shape shape = j.at("shape").get<Shape>();
  std::vector<float> data = j.at("data").get<std::vector<float>>();
  Array a = xt::zeros<float>(shape);
  REQUIRE(a.size() == data.size());
  std::copy(data.begin(), data.end(), a.begin());
  return a;
}

template <class T = int64_t>
inline xt::xarray<T> to_int_array(const nlohmann::json& j) {
  Shape shape = j.at("shape").get<Shape>();
  std::vector<T> data = j.at("data").get<std::vector<T>>();
  xt::xarray<T> a = xt::zeros<T>(shape);
  REQUIRE(a.size() == data.size());
  std::copy(data.begin(), data.end(), a.begin());
  return a;
}

// Empty when every |a - b| <= atol + rtol * |b| (NaN never passes); otherwise
// a sentence naming the first element that differs.
inline std::string mismatch(const Array& a, const Array& b, double rtol = 1e-5, double atol = 1e-6) {
  if (!std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()))
    return "shapes differ: " + shape_str(a.shape()) + " vs " + shape_str(b.shape());
  for (std::size_t i = 0; i < a.size(); ++i) {
    double x = a.data()[i], y = b.data()[i];
    if (!(std::abs(x - y) <= atol + rtol * std::abs(y))) {
      std::ostringstream s;
      s << "element " << i << ": " << x << " vs " << y << " (diff " << std::abs(x - y) << ")";
      return s.str();
    }
  }
  return "";
}

inline bool allclose(const Array& a, const Array& b, double rtol = 1e-5, double atol = 1e-6) {
  return mismatch(a, b, rtol, atol).empty();
}

}  // namespace tg::test

// CHECK_ALLCLOSE(a, b[, rtol[, atol]]): on failure prints the first differing element.
#define CHECK_ALLCLOSE(a, b, ...)                                                \
  do {                                                                           \
    std::string why_ = ::tg::test::mismatch((a), (b)__VA_OPT__(, ) __VA_ARGS__); \
    CHECK_MESSAGE(why_.empty(), #a " vs " #b ": " << why_);                      \
  } while (0)

namespace tg::test {

// gradcheck of fn at inputs (finite differences against backward()); fails with its report.
inline void check_grad(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  GradcheckReport r = gradcheck(fn, inputs);
  CHECK_MESSAGE(r.ok, r.str());
  CHECK(r.checked > 0);
}

// Case `name` of tests/data/<file>.json, for the files that keep their cases
// under "cases".
inline const nlohmann::json& reference_case(const std::string& file, const std::string& name) {
  return reference(file).at("cases").at(name);
}

// Case `name` of tests/data/core_reference.json (tests/tools/gen_core_reference.py).
inline const nlohmann::json& core_case(const std::string& name) {
  return reference_case("core_reference", name);
}

// Runs fn on the case's inputs (fn may read the case's other fields, such as
// fixed indices) and compares the output, and the gradients of sum(out * w),
// with PyTorch's.
inline void check_core_parity(const std::string& name,
                              const std::function<Tensor(std::vector<Tensor>&, const nlohmann::json&)>& fn,
                              double grad_atol = 1e-6) {
  CAPTURE(name);
  const nlohmann::json& c = core_case(name);
  std::vector<Tensor> in;
  for (const auto& j : c.at("inputs")) in.push_back(Tensor(to_array(j), true));
  Tensor out = fn(in, c);
  CHECK_ALLCLOSE(out.value(), to_array(c.at("out")), 1e-5, 1e-6);
  out.backward(to_array(c.at("w")));
  for (std::size_t i = 0; i < in.size(); ++i)
    CHECK_ALLCLOSE(in[i].grad_dense(), to_array(c.at("grads")[i]), 1e-5, grad_atol);
}

// Loads a PyTorch state dict, stored as [[name, array], ...] in the order of
// its state_dict(), into `model`; first checks that the model's parameters
// have the same names in the same order.
inline void load_reference_state(nn::Module& model, const nlohmann::json& state_dict) {
  std::vector<std::string> ours, theirs;
  for (const auto& [name, t] : model.named_parameters()) ours.push_back(name);
  StateDict state;
  for (const auto& p : state_dict) {
    theirs.push_back(p[0].get<std::string>());
    state[theirs.back()] = to_array(p[1]);
  }
  CHECK(ours == theirs);
  model.load_state_dict(state);
}

// ------------------------------------------------------------------ optimizers

// Puts g in p's gradient slot, as backward() would.
inline void set_grad(Tensor& p, Array g) {
  p.grad_mut().clear();
  p.grad_mut().accumulate(std::move(g), p.shape());
}
inline void set_grad(Tensor& p, SparseRows g) {
  p.grad_mut().clear();
  p.grad_mut().accumulate(std::move(g), p.shape());
}

// The optimizer a reference case names ("SGD", "Adam", "AdamW" or "SparseAdam",
// which is our Adam: it takes sparse gradients itself), over `params`, with the
// case's "options" and, if it has them, "groups" ({"params": [indices], "lr",
// "weight_decay"}). An option the case leaves out has PyTorch's default.
inline std::unique_ptr<optim::Optimizer> make_optimizer(const nlohmann::json& c,
                                                        const std::vector<Tensor>& params) {
  const nlohmann::json& o = c.at("options");
  auto number = [&](const char* key, double fallback) {
    return o.contains(key) ? o[key].get<double>() : fallback;
  };
  std::vector<optim::ParamGroup> groups;
  if (c.contains("groups") && !c["groups"].is_null()) {
    for (const auto& g : c["groups"]) {
      optim::ParamGroup group;
      for (std::size_t i : g.at("params").get<std::vector<std::size_t>>())
        group.params.push_back(params.at(i));
      if (g.contains("lr")) group.lr = g["lr"].get<double>();
      if (g.contains("weight_decay")) group.weight_decay = g["weight_decay"].get<double>();
      groups.push_back(group);
    }
  } else {
    groups.push_back({params, std::nullopt, std::nullopt});
  }
  const std::string name = c.at("optimizer");
  if (name == "SGD")
    return std::make_unique<optim::SGD>(groups, optim::SGDOptions{.lr = number("lr", 0),
                                                                  .momentum = number("momentum", 0),
                                                                  .dampening = number("dampening", 0),
                                                                  .weight_decay = number("weight_decay", 0),
                                                                  .nesterov = o.value("nesterov", false)});
  std::pair<double, double> betas{0.9, 0.999};
  if (o.contains("betas")) betas = {o["betas"][0].get<double>(), o["betas"][1].get<double>()};
  if (name == "AdamW")
    return std::make_unique<optim::AdamW>(groups,
                                          optim::AdamWOptions{.lr = number("lr", 1e-3),
                                                              .betas = betas,
                                                              .weight_decay = number("weight_decay", 1e-2),
                                                              .amsgrad = o.value("amsgrad", false)});
  REQUIRE((name == "Adam" || name == "SparseAdam"));
  return std::make_unique<optim::Adam>(groups, optim::AdamOptions{.lr = number("lr", 1e-3),
                                                                  .betas = betas,
                                                                  .weight_decay = number("weight_decay", 0),
                                                                  .amsgrad = o.value("amsgrad", false)});
}

// Both optimizers hold the same state, entry by entry and bit by bit.
inline void check_same_state(const optim::Optimizer& a, const optim::Optimizer& b) {
  const optim::StateDict x = a.state_dict(), y = b.state_dict();
  CHECK(x.metadata == y.metadata);
  REQUIRE(x.tensors.size() == y.tensors.size());
  for (const auto& [name, value] : x.tensors) {
    CAPTURE(name);
    CHECK(value == y.tensors.at(name));
  }
}

// What bounds the rounding of each element of a matrix product op(A) op(B)
// (one per matrix of a batch): `magnitude` holds sum_i |a_i b_i| (plus |c| for
// a term added on top, like a bias) and `terms` the count k of the sum. Any
// order of summation in float, blocked or fused, leaves an element within
// k u magnitude of the exact value, u = 2^-24 (Higham, Accuracy and Stability
// of Numerical Algorithms, 3.1); so two such results differ by at most twice that.
struct Bound {
  std::vector<double> magnitude;
  std::size_t terms = 0;
};

// |op(A)| |op(B)| in double, over `batch` matrices held one after another;
// op transposes the last two dims when asked. `added` (if not empty) is
// |c|, added to every element and counted as one more term.
inline Bound abs_product(const Array& A, const Array& B, bool trans_a, bool trans_b, std::size_t k,
                         const std::vector<double>& added = {}, std::size_t batch = 1) {
  const std::size_t a_cols = A.shape().back(), b_cols = B.shape().back();
  const std::size_t a_rows = A.size() / batch / a_cols, b_rows = B.size() / batch / b_cols;
  const std::size_t m = trans_a ? a_cols : a_rows, n = trans_b ? b_rows : b_cols;
  REQUIRE((trans_a ? a_rows : a_cols) == k);
  REQUIRE((trans_b ? b_cols : b_rows) == k);
  Bound out{std::vector<double>(batch * m * n, 0.0), k + (added.empty() ? 0 : 1)};
  for (std::size_t bi = 0; bi < batch; ++bi) {
    const float* a = A.data() + bi * a_rows * a_cols;
    const float* b = B.data() + bi * b_rows * b_cols;
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double sum = added.empty() ? 0.0 : added[j];
        for (std::size_t t = 0; t < k; ++t)
          sum += std::abs(static_cast<double>(trans_a ? a[t * a_cols + i] : a[i * a_cols + t])) *
                 std::abs(static_cast<double>(trans_b ? b[j * b_cols + t] : b[t * b_cols + j]));
        out.magnitude[(bi * m + i) * n + j] = sum;
      }
  }
  return out;
}

// |v| for a vector added to every row of a product (a bias), as abs_product's `added`.
inline std::vector<double> abs_values(const Array& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = std::abs(static_cast<double>(v.data()[i]));
  return out;
}

// "" when every element of a and b is within 2 k u magnitude of the other (their
// sizes equal), else the first one that is not.
inline std::string product_mismatch(const Array& a, const Array& b, const Bound& bound) {
  if (a.size() != b.size() || a.size() != bound.magnitude.size())
    return "sizes " + std::to_string(a.size()) + ", " + std::to_string(b.size()) + " and bound " +
           std::to_string(bound.magnitude.size());
  const double u = std::ldexp(1.0, -24);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double allowed = 2.0 * static_cast<double>(bound.terms) * u * bound.magnitude[i];
    const double diff = std::abs(static_cast<double>(a.data()[i]) - static_cast<double>(b.data()[i]));
    if (!(diff <= allowed)) {
      std::ostringstream s;
      s << "element " << i << ": " << a.data()[i] << " vs " << b.data()[i] << " (diff " << diff
        << ", allowed " << allowed << " for " << bound.terms << " terms)";
      return s.str();
    }
  }
  return "";
}

}  // namespace tg::test

// CHECK_PRODUCT_CLOSE(a, b, bound): two computations of one matrix product
// agree within what float rounding allows for its sizes (tg::test::Bound).
#define CHECK_PRODUCT_CLOSE(a, b, bound)                                \
  do {                                                                  \
    std::string why_ = ::tg::test::product_mismatch((a), (b), (bound)); \
    CHECK_MESSAGE(why_.empty(), #a " vs " #b ": " << why_);             \
  } while (0)

namespace tg::test {

// Sets the thread count (core/kernels/parallel.hpp) for one test and puts back the one before.
struct Threads {
  std::size_t before = get_num_threads();
  explicit Threads(std::size_t n) { set_num_threads(n); }
  ~Threads() { set_num_threads(before); }
};

// The same shape and the same bits.
inline bool same_bits(const Array& a, const Array& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace tg::test
