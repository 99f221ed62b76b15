// Tutorial step 4: the low-rank observation behind Linformer. The singular values of the
// attention matrix P of a small masked LM, untrained and after a short training, with
// nn::encoder_spectrum (the Linformer paper's Figure 1, in miniature), against a full-rank
// reference. Writes tutorial_04_spectrum.png. docs/tutorial/04-low-rank.md walks through it.
#include <sstream>

#include "tutorial.h"

using namespace tinyformer;
using nn::data::ByteTokenizer;
using tutorial::check;

namespace {

// The cumulative spectrum of each layer, averaged over its heads: [layer][index].
std::vector<std::vector<double>> layer_curves(nn::MaskedLM& model, const Tensor& tokens) {
  NoGradGuard no_grad;
  model.eval();
  // encoder_spectrum runs the encoder on its input embeddings: tokens + positions.
  const Tensor x =
      model.body->learned_positions->forward(model.body->token_embedding->forward(tokens));
  std::vector<std::vector<double>> curves;
  for (const auto& heads : nn::encoder_spectrum(*model.body->encoder, x)) {
    std::vector<double> mean(heads[0].cumulative.size(), 0.0);
    for (const nn::HeadSpectrum& h : heads)
      for (std::size_t i = 0; i < mean.size(); ++i)
        mean[i] += h.cumulative[i] / static_cast<double>(heads.size());
    curves.push_back(mean);
  }
  model.train();
  return curves;
}

}  // namespace

int main(int argc, char** argv) {
  manual_seed(4);
  std::printf("Step 4: the spectrum of P\n");
  const std::int64_t n = 64, batch = 16, k = 8;
  const bool smoke = tutorial::smoke(argc, argv);
  const std::int64_t steps = smoke ? 10 : 600;
  const nn::EncoderConfig config{
      .layers = 2, .d_model = 64, .heads = 4, .d_ff = 128, .max_seq_len = n, .dropout = 0.0};
  // Positions at five times the token scale, the recipe of byte-level pretraining (nn::InitConfig).
  nn::MaskedLM model(config, ByteTokenizer::vocab_size, true, nn::PositionEncoding::learned,
                     nn::InitConfig::language_model());
  const nn::data::TokenChunks chunks(ByteTokenizer::encode(tutorial::tiny_corpus()), n);
  // A fixed batch of 8 sequences to measure the spectra on.
  const Tensor probe = chunks.batch({0, 50, 100, 150, 200, 250, 300, 350});

  const auto untrained = layer_curves(model, probe);

  // A short masked-LM training: 15% of the bytes hidden, predicted from the rest.
  nn::optim::AdamW optimizer(model.parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  nn::data::Loader loader(chunks.size(), {.batch_size = batch, .drop_last = true, .seed = 4});
  double first = 0, last = 0;
  for (std::int64_t step = 1; step <= steps; ++step) {
    const nn::data::LoaderBatch order = loader.next();
    const nn::data::MlmBatch b = nn::data::mlm_batch(chunks, order.indices, {}, 4, order.epoch);
    const Tensor loss = cross_entropy(
        model.forward(b.tokens).reshape({-1, ByteTokenizer::vocab_size}), b.labels.reshape({-1}));
    optimizer.zero_grad();
    loss.backward();
    nn::optim::clip_grad_norm(model.parameters(), 1.0);
    optimizer.step();
    (step == 1 ? first : last) = loss.item<double>();
  }
  std::printf("masked-LM loss %.3f at the first step, %.3f after %lld steps\n", first, last,
              static_cast<long long>(steps));
  const auto trained = layer_curves(model, probe);

  // cumulative[i]: the share of the singular values' sum carried by the first i + 1 of them.
  std::printf("share of the spectrum in the first k singular values, n = %lld:\n",
              static_cast<long long>(n));
  std::printf("  %-22s %8s %8s %8s\n", "", "k = 1", "k = 8", "k = 16");
  auto row = [](const char* name, const std::vector<double>& c) {
    std::printf("  %-22s %8.3f %8.3f %8.3f\n", name, c[0], c[7], c[15]);
  };
  row("untrained, layer 0", untrained[0]);
  row("untrained, layer 1", untrained[1]);
  row("trained, layer 0", trained[0]);
  row("trained, layer 1", trained[1]);
  std::printf("  %-22s %8.3f %8.3f %8.3f\n", "identity (full rank)", 1.0 / n, 8.0 / n, 16.0 / n);

  // A random P of the same size with sharp rows (softmax of large random scores) for contrast.
  const Tensor sharp = softmax(randn({1, 1, n, n}) * 4.0, -1);
  const auto random_curve = nn::attention_spectrum(sharp)[0].cumulative;
  row("random sharp P", random_curve);

  // The thresholds hold for every training trajectory seen (nine seeds, and the roundings of
  // different matrix-product kernels), not for one run only: layer 0, the lower of the two,
  // carried 0.93-0.99 at n/8 and 0.98-1.00 at n/4 (docs/tutorial/04-low-rank.md). n/4 is the
  // index of the paper's heat map (k = 128 of n = 512).
  for (std::size_t l = 0; l < 2; ++l) {
    const std::string layer = "layer " + std::to_string(l);
    tutorial::check_trained(
        smoke, trained[l][k - 1] > 0.9,
        "trained, " + layer + ": the first k = n/8 singular values carry over 90% of the sum");
    tutorial::check_trained(
        smoke, trained[l][2 * k - 1] > 0.95,
        "trained, " + layer + ": the first 2k = n/4 singular values carry over 95% of the sum");
    tutorial::check_trained(
        smoke, trained[l][k - 1] > untrained[l][k - 1],
        "trained, " + layer + ": more concentrated than the same layer untrained");
  }
  check(random_curve[k - 1] < 0.5,
        "a random P with sharp rows is far from low rank: its first k carry under half");
  // The figure: cumulative share against the index, as in the paper's Figure 1.
  const std::string dir = tutorial::figure_dir(argc, argv);
  const std::string csv = dir + "/tutorial_04_spectrum.csv";
  {
    std::ofstream out(csv);
    out << "index,untrained_l0,untrained_l1,trained_l0,trained_l1,random,identity\n";
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      out << i + 1 << "," << untrained[0][u] << "," << untrained[1][u] << "," << trained[0][u]
          << "," << trained[1][u] << "," << random_curve[u] << "," << (i + 1.0) / n << "\n";
    }
  }
  // Layers by colour (0 purple, 1 orange), untrained dashed and trained solid; the two
  // references in grey and black.
  std::ostringstream gp;
  gp << "set datafile separator ','\nset key bottom right\n"
     << "set title 'Spectrum of P (n = " << n << "): cumulative share of the singular values'\n"
     << "set xlabel 'singular value index'\nset ylabel 'cumulative share'\n"
     << "set yrange [0:1.02]\nset xrange [1:" << n << "]\n"
     << "plot '" << csv
     << "' every ::1 using 1:2 with lines lw 2 dt 2 lc 1 title 'untrained, layer 0', \\\n"
     << "  '' every ::1 using 1:3 with lines lw 2 dt 2 lc 4 title 'untrained, layer 1', \\\n"
     << "  '' every ::1 using 1:4 with lines lw 2 lc 1 title 'trained " << steps
     << " steps, layer 0', \\\n"
     << "  '' every ::1 using 1:5 with lines lw 2 lc 4 title 'trained " << steps
     << " steps, layer 1', \\\n"
     << "  '' every ::1 using 1:6 with lines lw 2 dt 4 lc rgb 'gray50' title 'random sharp P', "
        "\\\n"
     << "  '' every ::1 using 1:7 with lines lw 2 dt 3 lc rgb 'black' title 'identity (full "
        "rank)'\n";
  tutorial::plot(dir + "/tutorial_04_spectrum.png", gp.str());
  return tutorial::finish();
}
