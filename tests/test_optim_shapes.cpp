// A parameter whose shape changed after its optimizer state was made (rows
// added or removed, other columns): PyTorch raises a size-mismatch error where
// it keeps state (tests/data/optim_shape_reference.json, written by
// tests/tools/gen_optim_shape_reference.py). We throw std::invalid_argument
// naming the parameter and both shapes, from step(), state_dict() and the
// loads, before anything changes.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using namespace tg;
using namespace tg::optim;
using tg::test::check_same_state;
using tg::test::make_optimizer;
using tg::test::TempDir;
using tg::test::to_array;

namespace {

using tg::test::set_grad;  // here, beside the overload below, so that neither hides the other

// The listed rows of a dense [rows, cols] gradient, as backward() of an Embedding gives them.
void set_sparse_grad(Tensor& p, const Array& g, const std::vector<int64_t>& rows) {
  xt::xtensor<float, 2> values = xt::empty<float>({rows.size(), g.shape()[1]});
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t c = 0; c < g.shape()[1]; ++c) values(i, c) = g(static_cast<std::size_t>(rows[i]), c);
  set_grad(p, SparseRows{rows, std::move(values), g.shape()[0]});
}

void set_grad(Tensor& p, const Array& g, bool sparse, const std::vector<int64_t>& rows) {
  if (sparse)
    set_sparse_grad(p, g, rows);
  else
    set_grad(p, g);
}

// The message of the std::invalid_argument that f throws ("" if it throws none).
template <class F>
std::string invalid_argument_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// The optimizers whose state a shape change breaks, with dense or sparse gradients.
struct Kind {
  std::string name;
  std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)> make;
  bool sparse;
};
std::vector<Kind> stateful_kinds() {
  std::vector<Kind> kinds;
  for (bool sparse : {false, true}) {
    kinds.push_back({"SGD",
                     [](auto p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1, .momentum = 0.9}); },
                     sparse});
    kinds.push_back(
        {"Adam", [](auto p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.1}); }, sparse});
    kinds.push_back(
        {"Adam", [](auto p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.1, .amsgrad = true}); },
         sparse});
    kinds.push_back(
        {"AdamW", [](auto p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.1}); }, sparse});
  }
  return kinds;
}

// fc.weight's shapes after the change: rows added, rows removed, other columns.
const std::vector<Shape> new_shapes = {{4, 2}, {2, 2}, {3, 3}};

Array ramp(const Shape& shape, float scale, float offset) {
  Array a = xt::empty<float>(shape);
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = static_cast<float>(i) * scale + offset;
  return a;
}

// Two parameters, emb.weight [2, 2] before fc.weight [3, 2], each with one step taken.
struct Model {
  Tensor emb{ramp({2, 2}, 0.5f, -1), true}, fc{ramp({3, 2}, 0.25f, 0.5f), true};
  std::unique_ptr<Optimizer> opt;
  explicit Model(const Kind& kind) : opt(kind.make({emb, fc})) {
    emb.set_name("emb.weight");
    fc.set_name("fc.weight");
    step(kind.sparse);
  }
  void set_grads(bool sparse) {
    set_grad(emb, ramp(emb.shape(), 0.5f, 1), sparse, {1});
    set_grad(fc, ramp(fc.shape(), -0.25f, 1), sparse, {0, static_cast<int64_t>(fc.shape()[0] - 1)});
  }
  void step(bool sparse) {
    set_grads(sparse);
    opt->step();
  }
};

}  // namespace

TEST_SUITE("optim") {
  TEST_CASE("a parameter that changed shape: we throw where PyTorch raises, and step as it does elsewhere") {
    int raised = 0, stepped = 0;
    for (const nlohmann::json& c : tg::test::reference("optim_shape_reference").at("cases")) {
      const bool sparse = c.at("sparse");
      CAPTURE(c.at("optimizer").get<std::string>());
      CAPTURE(c.at("options").dump());
      CAPTURE(sparse);
      const Array new_value = to_array(c.at("new_value"));
      CAPTURE(shape_str(new_value.shape()));
      Tensor w(to_array(c.at("init")), true);
      w.set_name("fc.weight");
      std::unique_ptr<Optimizer> opt = make_optimizer(c, {w});
      set_grad(w, to_array(c.at("grad1")), sparse, c.at("rows1").get<std::vector<int64_t>>());
      opt->step();

      w.value_mut() = new_value;
      set_grad(w, to_array(c.at("grad2")), sparse, c.at("rows2").get<std::vector<int64_t>>());
      const uint64_t version = w.version();
      if (c.at("raised")) {
        ++raised;
        const std::string what = invalid_argument_of([&] { opt->step(); });
        CHECK(what.find(opt->name() + ".step: parameter 0 (fc.weight) has shape " +
                        shape_str(new_value.shape()) + " but its state ") != std::string::npos);
        CHECK(what.find("has shape [3, 2]") != std::string::npos);
        CHECK(w.value() == new_value);
        CHECK(w.version() == version);  // not even written
        const std::string saving = invalid_argument_of([&] { (void)opt->state_dict(); });
        CHECK(saving.find(opt->name() + ".state_dict: parameter 0 (fc.weight) has shape " +
                          shape_str(new_value.shape())) != std::string::npos);
      } else {
        ++stepped;  // SGD without momentum keeps no state
        opt->step();
        CHECK_ALLCLOSE(w.value(), to_array(c.at("expected")), 1e-6, 0);
        CHECK(opt->state_dict().tensors.empty());
      }
    }
    CHECK(raised == 34);
    CHECK(stepped == 11);
  }

  TEST_CASE("step() on a parameter that changed shape throws before it changes any parameter or state") {
    for (const Kind& kind : stateful_kinds()) {
      for (const Shape& shape : new_shapes) {
        CAPTURE(kind.name);
        CAPTURE(kind.sparse);
        CAPTURE(shape_str(shape));
        Model model(kind), control(kind);
        const Array emb_before = model.emb.value(), fc_before = model.fc.value();
        const Array replaced = ramp(shape, 0.125f, 1);
        {
          NoGradGuard no_grad;  // copy_ keeps the shape; only a new value changes it
          CHECK_THROWS_AS(model.fc.copy_(replaced), std::invalid_argument);
        }
        model.fc.value_mut() = replaced;
        model.set_grads(kind.sparse);
        const uint64_t emb_version = model.emb.version(), fc_version = model.fc.version();
        const std::string what = invalid_argument_of([&] { model.opt->step(); });
        CHECK(what.find(kind.name + ".step: parameter 1 (fc.weight) has shape " + shape_str(shape) +
                        " but its state ") != std::string::npos);
        CHECK(what.find("has shape [3, 2]") != std::string::npos);
        // emb.weight comes first and its gradient fits: it was not updated either.
        CHECK(model.emb.value() == emb_before);
        CHECK(model.fc.value() == replaced);
        CHECK(model.emb.version() == emb_version);
        CHECK(model.fc.version() == fc_version);

        // fc.weight back in its shape: the state is the control's, step counts and all.
        model.fc.value_mut() = fc_before;
        check_same_state(*model.opt, *control.opt);
        model.step(kind.sparse);
        control.step(kind.sparse);
        CHECK(model.emb.value() == control.emb.value());
        CHECK(model.fc.value() == control.fc.value());
        check_same_state(*model.opt, *control.opt);
      }
    }
  }

  TEST_CASE("state_dict() and save() of a parameter that shrank or grew throw, naming it and both shapes") {
    TempDir dir;
    for (const Kind& kind : stateful_kinds()) {
      for (const Shape& shape : new_shapes) {
        CAPTURE(kind.name);
        CAPTURE(shape_str(shape));
        Model model(kind);
        const optim::StateDict before = model.opt->state_dict();
        const Array fc_before = model.fc.value();
        model.fc.value_mut() = ramp(shape, 1, 0);
        const std::string what = invalid_argument_of([&] { (void)model.opt->state_dict(); });
        CHECK(what.find(kind.name + ".state_dict: parameter 1 (fc.weight) has shape " + shape_str(shape) +
                        " but its state ") != std::string::npos);
        CHECK(what.find("has shape [3, 2]") != std::string::npos);
        const std::string path = dir.file("opt.safetensors");
        CHECK_THROWS_AS(model.opt->save(path), std::invalid_argument);
        CHECK(!std::filesystem::exists(path));
        CHECK_THROWS_AS(save_checkpoint(path, {.optimizer = model.opt.get()}), std::invalid_argument);
        CHECK(!std::filesystem::exists(path));
        model.fc.value_mut() = fc_before;
        const optim::StateDict after = model.opt->state_dict();
        CHECK(after.metadata == before.metadata);
        CHECK(after.tensors == before.tensors);
      }
    }
  }

  TEST_CASE(
      "loading a state made for the old shape throws, naming the parameter and both shapes, and loads "
      "nothing") {
    TempDir dir;
    for (const Kind& kind : stateful_kinds()) {
      for (const Shape& shape : new_shapes) {
        CAPTURE(kind.name);
        CAPTURE(shape_str(shape));
        Model saved(kind);
        const optim::StateDict state = saved.opt->state_dict();
        saved.opt->save(dir.file("opt.safetensors"));
        save_checkpoint(dir.file("run.ckpt"), {.optimizer = saved.opt.get()});

        // A new optimizer, over a model whose fc.weight has the new shape.
        Model changed(kind);
        changed.fc.value_mut() = ramp(shape, 1, 0);
        std::unique_ptr<Optimizer> opt = kind.make({changed.emb, changed.fc});
        opt->set_lr(0.5);
        const std::string first_entry =
            "tensor 'state.1." + std::string(kind.name == "SGD" ? "momentum_buffer" : "exp_avg") + "'";
        const std::string expected =
            first_entry + " has shape [3, 2] but parameter 1 has shape " + shape_str(shape) + " (fc.weight)";
        Checkpoint checkpoint{.optimizer = opt.get()};
        for (const std::string& what :
             {invalid_argument_of([&] { opt->load_state_dict(state); }),
              invalid_argument_of([&] { opt->load(dir.file("opt.safetensors")); }),
              invalid_argument_of([&] { load_checkpoint(dir.file("run.ckpt"), checkpoint); })})
          CHECK(what.find(kind.name + ".load_state_dict: " + expected) != std::string::npos);
        CHECK(opt->lr() == 0.5);  // the saved lr (0.1) was not loaded either
        CHECK(opt->state_dict().tensors.empty());
      }
    }
  }
}  // TEST_SUITE
