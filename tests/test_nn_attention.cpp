// CausalSelfAttention, TransformerBlock, GELU and a tiny GPT made of them (as
// examples/names_gpt.cpp makes one): parity with the PyTorch classes of
// tests/tools/names_gpt_reference.py (tests/data/transformer_reference.json:
// state dicts by name, outputs, gradients), causality, dropout, clone(), and
// the errors for bad sizes and inputs.
#include <doctest/doctest.h>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Indices;
using tg::Tensor;
using J = nlohmann::json;
namespace nn = tg::nn;

namespace {

// names_gpt.cpp's model, small: token and position embeddings, blocks, LayerNorm, head.
struct TinyGPT : nn::Module {
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::Sequential> blocks;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Linear> head;
  TinyGPT(std::size_t vocab, std::size_t context, std::size_t embed, std::size_t heads, int layers) {
    tok = register_module("tok", nn::Embedding(vocab, embed, {.sparse = false}));
    pos = register_module("pos", nn::Embedding(context, embed, {.sparse = false}));
    blocks = register_module("blocks", nn::Sequential());
    for (int i = 0; i < layers; ++i) blocks->push_back(nn::TransformerBlock(embed, heads));
    ln = register_module("ln", nn::LayerNorm(embed));
    head = register_module("head", nn::Linear(embed, vocab));
  }
  Tensor forward(const Indices& ids) const {
    const auto T = static_cast<int64_t>(ids.shape()[1]);
    return (*head)((*ln)((*blocks)(tok->forward(ids) + pos->forward(tg::arange(T)))));
  }
};

void load(nn::Module& model, const J& c) {
  tg::test::load_reference_state(model, c.at("state_dict"));  // PyTorch's names, in its order
  model.eval();
}

void check_grads(const nn::Module& model, const J& c) {
  std::map<std::string, Tensor> params;
  for (const auto& [n, t] : model.named_parameters()) params[n] = t;
  for (const auto& g : c.at("grads")) {
    CAPTURE(g[0].get<std::string>());
    CHECK_ALLCLOSE(params.at(g[0].get<std::string>()).grad_dense(), tg::test::to_array(g[1]), 1e-5, 1e-6);
  }
}

// A module of one Tensor in, one out: output, input gradient and parameter
// gradients of sum(out * w) against PyTorch's.
void check_module(nn::Module& model, const std::string& name) {
  CAPTURE(name);
  const J& c = tg::test::reference_case("transformer_reference", name);
  load(model, c);
  Tensor x(tg::test::to_array(c.at("input")), true);
  Tensor out = model(x);
  CHECK_ALLCLOSE(out.value(), tg::test::to_array(c.at("out")), 1e-5, 1e-6);
  out.backward(tg::test::to_array(c.at("w")));
  CHECK_ALLCLOSE(x.grad_dense(), tg::test::to_array(c.at("grad_input")), 1e-5, 1e-6);
  check_grads(model, c);
}

}  // namespace

TEST_SUITE("nn.attention") {
  TEST_CASE("PyTorch parity: CausalSelfAttention and TransformerBlock") {
    nn::CausalSelfAttention attn(8, 2);
    check_module(attn, "attention");
    nn::CausalSelfAttention one_head(6, 1);
    check_module(one_head, "attention_one_head");
    nn::TransformerBlock block(8, 2);
    check_module(block, "block");
  }

  TEST_CASE("PyTorch parity: a tiny GPT with position embeddings, its cross-entropy over every position") {
    const J& c = tg::test::reference_case("transformer_reference", "gpt");
    TinyGPT gpt(7, 6, 8, 2, 2);
    load(gpt, c);
    const Indices ids = tg::test::to_int_array(c.at("input"));  // [3, 5]: shorter than the context of 6
    Indices target = tg::test::to_int_array(c.at("target"));
    target.reshape({target.size()});
    Tensor logits = gpt.forward(ids);  // [3, 5, 7]
    CHECK_ALLCLOSE(logits.value(), tg::test::to_array(c.at("out")), 1e-5, 1e-6);
    Tensor loss = tg::cross_entropy(tg::reshape(logits, {-1, 7}), target);
    CHECK(loss.item() == doctest::Approx(c.at("loss").get<double>()).epsilon(1e-6));
    loss.backward();
    check_grads(gpt, c);
  }

  TEST_CASE("the parameters are named and shaped as documented") {
    nn::TransformerBlock block(8, 2);
    std::vector<std::pair<std::string, tg::Shape>> got;
    for (const auto& [n, t] : block.named_parameters()) got.emplace_back(n, t.shape());
    const std::vector<std::pair<std::string, tg::Shape>> want = {
        {"ln1.weight", {8}},           {"ln1.bias", {8}},
        {"attn.query.weight", {8, 8}}, {"attn.query.bias", {8}},
        {"attn.key.weight", {8, 8}},   {"attn.key.bias", {8}},
        {"attn.value.weight", {8, 8}}, {"attn.value.bias", {8}},
        {"attn.proj.weight", {8, 8}},  {"attn.proj.bias", {8}},
        {"ln2.weight", {8}},           {"ln2.bias", {8}},
        {"fc1.weight", {32, 8}},       {"fc1.bias", {32}},
        {"fc2.weight", {8, 32}},       {"fc2.bias", {8}}};
    CHECK(got == want);
    CHECK(block.attn->head_dim() == 4);
    CHECK(block.attn->num_heads() == 2);
  }

  TEST_CASE("causal: an output depends on its own and earlier positions only") {
    tg::Generator gen(3);
    nn::TransformerBlock block(8, 2, 0.0f, gen);
    Tensor x = tg::randn({2, 5, 8}, gen);
    Tensor changed = x.detach();
    // Position 3 only, one channel (LayerNorm would hide a change of every channel alike).
    for (std::size_t b = 0; b < 2; ++b) changed.value_mut()(b, 3, 5) += 1.0f;
    const Array y = block(x).value(), y2 = block(changed).value();
    for (std::size_t t = 0; t < 5; ++t) {
      CAPTURE(t);
      bool same = true;
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t c = 0; c < 8; ++c) same = same && y(b, t, c) == y2(b, t, c);
      CHECK(same == (t < 3));
    }
  }

  TEST_CASE("gradcheck through a block, with respect to its input and its weights") {
    tg::Generator gen(5);
    nn::TransformerBlock block(4, 2, 0.0f, gen);
    Tensor x = tg::randn({2, 3, 4}, gen, true);
    tg::test::check_grad(
        [&](const std::vector<Tensor>& in) { return block(in[0]); },
        {x, block.attn->query->weight, *block.attn->value->bias, *block.fc1->bias, *block.ln1->weight});
  }

  TEST_CASE("dropout: off after eval() and at p = 0; while training, masks from the module's generator") {
    tg::Generator gen(11);
    nn::TransformerBlock with(8, 2, 0.5f, gen);
    tg::Generator gen2(11);
    nn::TransformerBlock without(8, 2, 0.0f, gen2);  // the same weights: the same draws
    Tensor x = tg::randn({2, 4, 8}, gen);
    with.eval();
    CHECK(with(x).value() == without(x).value());
    with.train();
    const std::string before = gen.state();
    Tensor a = with(x), b = with(x);
    CHECK(gen.state() != before);  // the masks came from gen
    CHECK(a.value() != b.value());
    CHECK(a.value() != without(x).value());
  }

  TEST_CASE("clone: the same outputs from independent weights, the generator left alone and shared") {
    tg::Generator gen(7);
    nn::TransformerBlock block(8, 2, 0.1f, gen);
    const std::string state = gen.state();
    auto copy = std::static_pointer_cast<nn::TransformerBlock>(block.clone());
    CHECK(gen.state() == state);  // cloning draws nothing from gen
    Tensor x = tg::randn({1, 3, 8}, gen);
    block.eval();
    copy->eval();
    CHECK(block(x).value() == (*copy)(x).value());
    {
      tg::NoGradGuard no_grad;
      block.fc1->weight.value_mut() += 1.0f;
    }
    CHECK(block(x).value() != (*copy)(x).value());
    // While training, both draw their masks from gen.
    copy->train();
    const std::string at = gen.state();
    (*copy)(x);
    CHECK(gen.state() != at);
    auto attn_copy = std::static_pointer_cast<nn::CausalSelfAttention>(block.attn->clone());
    CHECK(attn_copy->num_heads() == 2);
    CHECK(attn_copy->key->weight.value() == block.attn->key->weight.value());
    CHECK(!attn_copy->key->weight.is_same(block.attn->key->weight));
  }

  TEST_CASE("GELU module: tg::gelu in a Sequential; a bad form is named") {
    nn::Sequential model(nn::Linear(3, 4), nn::GELU("tanh"));
    Tensor x = tg::ones({2, 3});
    CHECK(model(x).value() == tg::gelu(model.at<nn::Linear>(0)(x), "tanh").value());
    CHECK(nn::GELU().approximate() == "none");
    CHECK_THROWS_WITH_AS(nn::GELU("exact"),
                         doctest::Contains("GELU: approximate must be \"none\" or \"tanh\"; got \"exact\""),
                         std::invalid_argument);
  }

  TEST_CASE("bad sizes and inputs are named") {
    CHECK_THROWS_WITH_AS(nn::CausalSelfAttention(10, 3),
                         "CausalSelfAttention: embed_dim 10 must split into num_heads 3 equal heads",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::TransformerBlock(8, 0), doctest::Contains("TransformerBlock: embed_dim 8"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::TransformerBlock(8, 2, 1.0f), doctest::Contains("dropout must be in [0, 1)"),
                         std::invalid_argument);
    nn::CausalSelfAttention attn(8, 2);
    CHECK_THROWS_WITH_AS(attn(tg::zeros({2, 8})),
                         "CausalSelfAttention: input must be [B, T, 8]; got shape [2, 8]",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn(tg::zeros({2, 3, 6})), doctest::Contains("got shape [2, 3, 6]"),
                         std::invalid_argument);
    nn::TransformerBlock block(8, 2);
    CHECK_THROWS_WITH_AS(block(tg::zeros({2, 3, 6})), doctest::Contains("layer_norm"), std::invalid_argument);
  }
}
