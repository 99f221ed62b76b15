// Tutorial step 8: why Linformer cannot be causal, shown numerically, next to a small causal
// decoder (nn::CausalLM) trained for a few hundred steps that writes text, and its attention
// maps. Writes tutorial_08_leak.png and tutorial_08_attention_layer*.png.
// docs/tutorial/08-causal.md walks through it.
#include <chrono>
#include <set>
#include <sstream>

#include "tutorial.h"

using namespace tinyformer;
using nn::data::ByteTokenizer;
using tutorial::check;

namespace {

// x with position `pos` of every sequence replaced by other numbers.
Tensor perturb(const Tensor& x, std::int64_t pos) {
  const Tensor position = eq(arange(x.size(1), {.dtype = kInt64}),
                             scalar_tensor(static_cast<double>(pos), {.dtype = kInt64}))
                              .view({1, x.size(1), 1});
  return where(position, randn(x.shape()) * 3.0, x);
}

// The mean next-byte loss of `model` over consecutive windows of `tokens`.
double next_byte_loss(nn::CausalLM& model, const std::vector<std::int64_t>& tokens,
                      std::int64_t n) {
  NoGradGuard no_grad;
  model.eval();
  const nn::data::TokenChunks chunks(tokens, n + 1);
  std::vector<std::int64_t> all;
  for (std::int64_t i = 0; i < chunks.size(); ++i) all.push_back(i);
  const Tensor both = chunks.batch(all);  // [S, n + 1]
  const Tensor logits = model.forward(both.narrow(1, 0, n).contiguous());
  const double loss = cross_entropy(logits.reshape({-1, ByteTokenizer::vocab_size}),
                                    both.narrow(1, 1, n).contiguous().reshape({-1}))
                          .item<double>();
  model.train();
  return loss;
}

// The trained decoder's attention on one sentence of 32 bytes: a heat map per layer (queries
// down, keys across, labelled with the bytes, one colour scale for all heads) and, per head, the
// mean weight on the query's own byte and on the byte before it, and the mean distance back to
// the keys it reads (tutorial_08_attention.csv).
void draw_attention(nn::CausalLM& model, const std::string& dir) {
  const std::string sentence = "the old man sees the river again";
  const auto n = static_cast<std::int64_t>(sentence.size());
  const auto layers = model.encoder->attention_layers();
  for (const auto& attention : layers) attention->keep_attention(true);
  model.forward(from<std::int64_t>(ByteTokenizer::encode(sentence), {1, n}));
  std::vector<std::string> bytes;
  for (char c : sentence) bytes.emplace_back(1, c);
  std::ofstream csv(dir + "/tutorial_08_attention.csv");
  csv << "layer,head,own,previous,distance\n";
  double above_diagonal = 0;
  std::printf("attention of the trained decoder on \"%s\":\n", sentence.c_str());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Tensor p = layers[l]->last_attention().select(0, 0);  // [H, n, n]
    const auto w = p.contiguous().to_vector<double>();
    for (std::int64_t h = 0; h < p.size(0); ++h) {
      // Over the queries 1 .. n-1 (query 0 can only read itself).
      double own = 0, previous = 0, distance = 0;
      for (std::int64_t i = 1; i < n; ++i) {
        const auto row = static_cast<std::size_t>((h * n + i) * n);
        own += w[row + static_cast<std::size_t>(i)] / static_cast<double>(n - 1);
        previous += w[row + static_cast<std::size_t>(i - 1)] / static_cast<double>(n - 1);
        for (std::int64_t j = 0; j < n; ++j) {
          const double weight = w[row + static_cast<std::size_t>(j)];
          if (j > i) above_diagonal = std::max(above_diagonal, weight);
          distance += weight * static_cast<double>(i - j) / static_cast<double>(n - 1);
        }
      }
      csv << l << "," << h << "," << own << "," << previous << "," << distance << "\n";
      std::printf("  layer %zu head %lld: own byte %.2f, previous byte %.2f, mean distance %.1f\n",
                  l, static_cast<long long>(h), own, previous, distance);
    }
    const std::string png = dir + "/tutorial_08_attention_layer" + std::to_string(l) + ".png";
    try {
      nn::plot_attention(png, p, "trained decoder, layer " + std::to_string(l), "key (byte)", bytes,
                         bytes);
      std::printf("  figure: %s\n", png.c_str());
    } catch (const Error& error) {
      std::printf("  (no figure: %s)\n", error.what());
    }
  }
  for (const auto& attention : layers) attention->keep_attention(false);
  check(above_diagonal == 0.0,
        "the decoder's attention maps are causal: every weight above the diagonal is exactly 0");
}

}  // namespace

int main(int argc, char** argv) {
  manual_seed(8);
  std::printf("Step 8: causal attention, and why Linformer cannot have it\n");
  const std::int64_t n = 8, d_model = 16, heads = 2, future = 5;
  const Tensor x = randn({1, n, d_model});
  const Tensor x_changed = perturb(x, future);  // only position 5 differs

  // Full attention with the causal mask: query i sees keys 0..i, so outputs 0..4 cannot know
  // what stands at position 5.
  nn::MultiHeadAttention full(d_model, heads);
  const Tensor a = full.forward(x, {}, /*causal=*/true);
  const Tensor b = full.forward(x_changed, {}, /*causal=*/true);
  const double full_before = tutorial::max_abs_diff(a.narrow(1, 0, future), b.narrow(1, 0, future));
  std::printf("causal full attention: max change of outputs 0..%lld = %g\n",
              static_cast<long long>(future - 1), full_before);
  check(full_before == 0.0, "causal full attention: a future token changes no earlier output");
  check(tutorial::max_abs_diff(a.narrow(1, future, 1), b.narrow(1, future, 1)) > 1e-3,
        "(and position 5's own output does change)");

  // Linformer: the keys and values are first compressed to k rows, K' = E K, and row r of K'
  // is a weighted sum over all n positions. Query 0 attends to every row of K', so it sees
  // position 5 through them.
  const nn::ProjectionSpec spec{
      .k = 4, .max_seq_len = n, .head_dim = d_model / heads, .init = nn::ProjectionInit::normal};
  auto e = nn::make_projection("linear", spec);
  nn::LinformerAttention linformer(d_model, heads, e, e);
  const Tensor c = linformer.forward(x), d = linformer.forward(x_changed);
  std::vector<double> change, full_change;
  for (std::int64_t i = 0; i < n; ++i) {
    change.push_back(tutorial::max_abs_diff(c.narrow(1, i, 1), d.narrow(1, i, 1)));
    full_change.push_back(tutorial::max_abs_diff(a.narrow(1, i, 1), b.narrow(1, i, 1)));
  }
  std::printf("Linformer (k = 4): change of outputs 0..4 when position 5 changes:");
  for (std::int64_t i = 0; i < future; ++i)
    std::printf(" %.3g", change[static_cast<std::size_t>(i)]);
  std::printf("\n");
  check(*std::min_element(change.begin(), change.begin() + future) > 1e-4,
        "Linformer: position 5 changes every earlier output (the future leaks)");

  // The figure: how much each position's output moves when token 5 changes.
  const std::string dir = tutorial::figure_dir(argc, argv);
  {
    std::ofstream out(dir + "/tutorial_08_leak.csv");
    out << "position,causal_full,linformer\n";
    for (std::int64_t i = 0; i < n; ++i) {
      out << i << "," << full_change[static_cast<std::size_t>(i)] << ","
          << change[static_cast<std::size_t>(i)] << "\n";
    }
  }
  // Bars per output position: causal full attention (purple) and Linformer (green); the dashed
  // line separates the outputs before the changed token from the rest.
  tutorial::plot(dir + "/tutorial_08_leak.png",
                 "set datafile separator ','\nset style data histograms\n"
                 "set style fill solid 0.8\nset boxwidth 0.8\nset key top left\n"
                 "set title 'Change of each output when the token at position 5 changes'\n"
                 "set xlabel 'output position'\nset ylabel 'max |change| of the output'\n"
                 "set yrange [0:*]\n"
                 "set arrow from 4.5, graph 0 to 4.5, graph 1 nohead dt 2 lc rgb 'gray30'\n"
                 "set label 'outputs 0-4: before the change' at 4.4, graph 0.75 right\n"
                 "plot '" +
                     dir +
                     "/tutorial_08_leak.csv' every ::1 using 2:xtic(1) lc 1 "
                     "title 'causal full attention', '' every ::1 using 3 lc 2 "
                     "title 'Linformer, k = 4'\n");

  // Each row of E mixes positions; with the pooling start row r averages a window, and the
  // last rows cover the last positions, which every query attends to.
  auto pooled = nn::make_projection("linear", {.k = 4, .max_seq_len = n, .head_dim = 1});
  tutorial::print_matrix("E at its pooling start (rows: k = 4, columns: n = 8 positions)",
                         pooled->named_parameters().begin()->second.select(0, 0));

  // Asking for a causal mask is therefore an error that says why.
  try {
    linformer.forward(x, {}, /*causal=*/true);
    check(false, "Linformer refuses a causal mask");
  } catch (const Error& error) {
    std::printf("LinformerAttention with causal=true: %s\n", error.what());
    check(std::string(error.what()).find("future") != std::string::npos,
          "Linformer refuses a causal mask, and the message says why");
  }

  // --- A small causal decoder: next-byte prediction on a tiny text. ---
  const std::string text = tutorial::tiny_corpus();
  const nn::data::TextSplit split = nn::data::split_text(text, 0.1);
  const std::vector<std::int64_t> train_tokens = ByteTokenizer::encode(split.train);
  const std::vector<std::int64_t> val_tokens = ByteTokenizer::encode(split.validation);
  const bool smoke = tutorial::smoke(argc, argv);
  const std::int64_t context = 32, batch = 32, steps = smoke ? 10 : 600;
  nn::CausalLM model(
      {.layers = 2, .d_model = 48, .heads = 4, .d_ff = 96, .max_seq_len = context, .dropout = 0.0},
      ByteTokenizer::vocab_size, nn::InitConfig::language_model());
  nn::optim::AdamW optimizer(model.parameters(), {.lr = 5e-3, .weight_decay = 0.0});
  const nn::optim::WarmupCosine schedule(5e-3, std::min<std::int64_t>(30, steps / 10), steps, 5e-4);
  const nn::data::TokenChunks chunks(train_tokens, context + 1);
  nn::data::Loader loader(chunks.size(), {.batch_size = batch, .drop_last = true, .seed = 8});
  std::printf("CausalLM: %lld parameters, %lld training bytes, %lld steps of %lld x %lld\n",
              static_cast<long long>(model.num_parameters()),
              static_cast<long long>(train_tokens.size()), static_cast<long long>(steps),
              static_cast<long long>(batch), static_cast<long long>(context));
  const auto start = std::chrono::steady_clock::now();
  const double initial = next_byte_loss(model, val_tokens, context);
  for (std::int64_t step = 1; step <= steps; ++step) {
    const Tensor both = chunks.batch(loader.next().indices);  // [B, context + 1]
    const Tensor inputs = both.narrow(1, 0, context).contiguous();
    const Tensor targets = both.narrow(1, 1, context).contiguous();
    optimizer.set_lr(schedule.lr_at(step));
    const Tensor loss = cross_entropy(
        model.forward(inputs).reshape({-1, ByteTokenizer::vocab_size}), targets.reshape({-1}));
    optimizer.zero_grad();
    loss.backward();
    nn::optim::clip_grad_norm(model.parameters(), 1.0);
    optimizer.step();
    if (step % 150 == 0) {
      std::printf("  step %lld: training loss %.3f\n", static_cast<long long>(step),
                  loss.item<double>());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double val_loss = next_byte_loss(model, val_tokens, context);
  // The unigram baseline: byte frequencies of the training text, no context.
  std::vector<double> counts(ByteTokenizer::vocab_size, 0.5);
  for (std::int64_t t : train_tokens) counts[static_cast<std::size_t>(t)] += 1;
  double unigram = 0;
  for (std::int64_t t : val_tokens)
    unigram -=
        std::log(counts[static_cast<std::size_t>(t)] / static_cast<double>(train_tokens.size()));
  unigram /= static_cast<double>(val_tokens.size());
  std::printf(
      "validation perplexity: %.2f before training, %.2f after %.1f s (unigram baseline "
      "%.2f)\n",
      std::exp(initial), std::exp(val_loss), seconds, std::exp(unigram));
  tutorial::check_trained(smoke, std::exp(val_loss) < 0.5 * std::exp(unigram),
                          "the trained decoder's perplexity is below half the unigram baseline's");

  const auto greedy = model.generate(ByteTokenizer::encode("the cat "), 60, {.temperature = 0});
  const auto sampled =
      model.generate(ByteTokenizer::encode("a dog "), 60, {.temperature = 0.8, .seed = 1});
  std::printf("greedy:  the cat %s\n", ByteTokenizer::decode(greedy).c_str());
  std::printf("sampled: a dog %s\n", ByteTokenizer::decode(sampled).c_str());
  // Words of the sample that are words of the corpus.
  std::set<std::string> vocabulary;
  {
    std::istringstream words(text);
    for (std::string w; words >> w;) vocabulary.insert(w);
  }
  std::istringstream words("a dog " + ByteTokenizer::decode(sampled));
  int known = 0, total = 0;
  for (std::string w; words >> w; ++total) known += vocabulary.count(w) > 0;
  std::printf("%d of %d words of the sample are words of the corpus\n", known, total);
  tutorial::check_trained(smoke, known >= 0.8 * total,
                          "at least 80% of the sampled words are words of the corpus");

  NoGradGuard no_grad;
  model.eval();
  draw_attention(model, dir);

  // The decoder is causal, exactly: a later token never changes an earlier position's logits.
  std::vector<std::int64_t> seq = ByteTokenizer::encode("the old man sees the river again.");
  seq.resize(static_cast<std::size_t>(context));
  const Tensor before = model.forward(from<std::int64_t>(seq, {1, context}));
  seq[20] = ByteTokenizer::byte_id('#');
  const Tensor after = model.forward(from<std::int64_t>(seq, {1, context}));
  check(tutorial::max_abs_diff(before.narrow(1, 0, 20), after.narrow(1, 0, 20)) == 0.0,
        "CausalLM: changing byte 20 leaves the logits of positions 0..19 bit for bit equal");
  return tutorial::finish();
}
