// inspect_attention: what a language model trained by train_mlm (a masked LM) or train_causal_lm
// (a decoder, whose maps are causal) attends to. From its checkpoint and a
// text, it draws every layer's attention probabilities as heat maps (one PNG per layer, a panel
// per head, one colour scale, the bytes as labels) and the spectrum of P, the Linformer paper's
// Figure 1: each head's singular values, sorted, as a normalised cumulative sum, for the trained
// model against the same model freshly initialised with the training seed. The spectra go to a CSV
// and a PNG, and the share of the mass in the first k values to stdout. docs/inspect.md shows and
// explains the figures.
//
//   inspect_attention --checkpoint train_mlm.safetensors --data text.txt
//   inspect_attention --checkpoint full.safetensors --text "Some text..." --out figures/full
//
// The model comes from the checkpoint alone (nn::load_model reads the description the training
// program saves with it), so no model flag is repeated here.
#include <tinyformer/tinyformer.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "train_common.h"

using namespace tinyformer;
using nn::data::ByteTokenizer;
using train::UsageError;
namespace fs = std::filesystem;

namespace {

constexpr const char* kProgram = "inspect_attention";

struct Options {
  std::string checkpoint = "train_mlm.safetensors";
  std::string text;
  std::string data;
  std::string out = "inspect_attention";
  std::int64_t seq_len = 0;           // 0: the model's max_seq_len
  std::optional<std::uint64_t> seed;  // unset: the checkpoint's training seed
  std::int64_t sequences = 16;
  std::string mass_at = "1,8,16,32,64";
  std::int64_t mark = 32;
  std::string device = "cpu";
  int threads = 0;
};

std::vector<std::size_t> parse_counts(const std::string& list) {
  std::vector<std::size_t> counts;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    std::size_t value = 0;
    const auto [ptr, ec] = std::from_chars(list.data() + start, list.data() + end, value);
    if (ec != std::errc() || ptr != list.data() + end || value == 0) {
      throw UsageError("--mass-at " + nn::flags::quoted(list) +
                       ": expected a comma-separated list of positive counts, e.g. 1,8,32");
    }
    counts.push_back(value);
    start = end + 1;
  }
  return counts;
}

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{"Attention heat maps and attention spectra of a train_mlm checkpoint", kProgram};
  app.add_option("--checkpoint", o.checkpoint, "The train_mlm checkpoint to inspect")
      ->capture_default_str();
  auto* text = app.add_option("--text", o.text, "The text to run the model on");
  app.add_option("--data", o.data, "A text file to run the model on")->excludes(text);
  app.add_option("--out", o.out, "Directory for the PNG and CSV files")->capture_default_str();
  app.add_option("--seq-len", o.seq_len,
                 "The text is cut into sequences of this length (default: the model's longest, "
                 "the training run's --seq-len)")
      ->check(train::integer(1));
  app.add_option("--seed", o.seed,
                 "Seed of the untrained model's initialisation (default: the checkpoint's "
                 "training seed, so the untrained model is the trained one at step 0)")
      ->check(train::integer(0, UINT64_MAX));
  app.add_option("--sequences", o.sequences,
                 "At most this many sequences, spread over the text, averaged in the spectra; "
                 "the heat maps show the first")
      ->check(train::integer(1))
      ->capture_default_str();
  app.add_option("--mass-at", o.mass_at,
                 "Counts k at which the summary prints the share of the singular-value mass in "
                 "the first k values")
      ->capture_default_str();
  app.add_option("--mark", o.mark, "Index marked in the spectrum plot (0: none)")
      ->check(train::integer(0))
      ->capture_default_str();
  app.add_option("--device", o.device, "cpu or cuda[:N]")->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads (0: OpenMP's default)")
      ->check(train::integer(0, INT_MAX));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + "; run with --help for the options");
  }
  if (o.text.empty() && o.data.empty()) {
    throw UsageError("give the text to inspect: --text \"...\" or --data FILE");
  }
  parse_counts(o.mass_at);
  return o;
}

// --- The models. ---

// The trained model, the same configuration freshly initialised, and what describes them.
struct Models {
  nn::EncoderConfig config;
  nn::ModelKind kind = nn::ModelKind::masked_lm;
  std::shared_ptr<nn::Module> trained;  // a MaskedLM or a CausalLM
  std::shared_ptr<nn::Module> untrained;
  std::uint64_t seed = 1;  // of the untrained model
};

// The untrained model's seed: --seed, else the training run's ("config.seed"), else 1.
std::uint64_t untrained_seed(const nn::Metadata& recorded, const Options& o) {
  if (o.seed) return *o.seed;
  const auto it = recorded.find("config.seed");
  if (it == recorded.end()) return 1;
  const std::string& value = it->second;
  std::uint64_t seed = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), seed);
  if (ec != std::errc() || ptr != value.data() + value.size()) {
    throw UsageError("--checkpoint " + o.checkpoint + " records the seed '" + value +
                     "', not a number; pass --seed");
  }
  return seed;
}

// The starting scales train_mlm recorded (config.position-std), else its recipe's
// (nn::InitConfig::language_model()).
nn::InitConfig untrained_init(const nn::Metadata& recorded, const Options& o) {
  nn::InitConfig init = nn::InitConfig::language_model();
  const auto it = recorded.find("config.position-std");
  if (it == recorded.end()) return init;
  const std::string& value = it->second;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, init.position_std);
  if (ec != std::errc() || ptr != end || !(init.position_std >= 0)) {
    throw UsageError("--checkpoint " + o.checkpoint + " records the position std '" + value +
                     "', not a number of 0 or more");
  }
  return init;
}

// Opens the checkpoint's model (nn::load_model: its description is in the file) and builds its
// untrained twin: the same description and starting scales, built after seeding the generator with
// the training seed, as train_mlm builds its model, so that it is the trained model at step 0.
Models open_models(Options& o, Device device) {
  Models m;
  const nn::LoadedModel loaded = nn::load_model(o.checkpoint, device);
  if (loaded.kind() != nn::ModelKind::masked_lm && loaded.kind() != nn::ModelKind::causal_lm) {
    throw UsageError("--checkpoint " + o.checkpoint + " holds a " +
                     nn::model_kind_name(loaded.kind()) +
                     "; inspect_attention reads language models (the checkpoints of train_mlm "
                     "and train_causal_lm)");
  }
  m.kind = loaded.kind();
  m.config = loaded.config();
  if (o.seq_len == 0) o.seq_len = m.config.max_seq_len;
  if (o.seq_len > m.config.max_seq_len) {
    throw UsageError("--seq-len " + std::to_string(o.seq_len) + " is longer than the model's " +
                     std::to_string(m.config.max_seq_len) + " positions; use at most that");
  }
  m.trained = loaded.module;
  m.trained->eval();
  m.seed = untrained_seed(loaded.metadata, o);
  manual_seed(m.seed);
  m.untrained = nn::make_model(loaded.description, untrained_init(loaded.metadata, o));
  m.untrained->to(device);
  m.untrained->eval();
  return m;
}

// --- The input. ---

// The text as token sequences [B, n]: one sequence of the whole text when it is at most
// --seq-len bytes, otherwise up to --sequences chunks of --seq-len bytes spread evenly over it
// (the tail shorter than a chunk is left out). No padding, so every row of P is a real query.
Tensor input_tokens(const Options& o, std::string& text) {
  if (!o.data.empty()) {
    try {
      text = nn::data::load_text(o.data);
    } catch (const tinyformer::Error& e) {
      throw UsageError(std::string("--data: ") + e.what());
    }
  } else {
    text = o.text;
  }
  std::vector<std::int64_t> ids = ByteTokenizer::encode(text);
  if (ids.size() < 2) throw UsageError("the text has fewer than 2 bytes; give a longer one");
  const auto count = static_cast<std::int64_t>(ids.size());
  if (count <= o.seq_len) return from<std::int64_t>(ids, {1, count});
  const nn::data::TokenChunks chunks(std::move(ids), o.seq_len);
  const std::int64_t used = std::min(chunks.size(), o.sequences);
  std::vector<std::int64_t> indices;
  for (std::int64_t i = 0; i < used; ++i) indices.push_back(i * chunks.size() / used);
  return chunks.batch(indices);
}

// The first bytes of the text, printable, for titles.
std::string excerpt(const std::string& text, std::size_t length) {
  std::string out;
  for (unsigned char c : text.substr(0, length)) out += c >= 32 && c < 127 ? char(c) : ' ';
  return text.size() > length ? out + "..." : out;
}

// --- The outputs. ---

void write_spectrum_csv(const std::string& path, const std::vector<nn::NamedSpectra>& models) {
  std::string csv = "model,layer,head,index,singular_value,cumulative\n";
  char line[160];
  for (const nn::NamedSpectra& model : models) {
    for (std::size_t l = 0; l < model.layers.size(); ++l) {
      for (std::size_t h = 0; h < model.layers[l].size(); ++h) {
        const nn::HeadSpectrum& s = model.layers[l][h];
        for (std::size_t i = 0; i < s.cumulative.size(); ++i) {
          std::snprintf(line, sizeof line, "%s,%zu,%zu,%zu,%.6g,%.6f\n", model.name.c_str(), l, h,
                        i + 1, s.singular_values[i], s.cumulative[i]);
          csv += line;
        }
      }
    }
  }
  nn::write_file_atomically(path, csv, "--out " + path);
}

void print_summary(const std::vector<nn::NamedSpectra>& models, std::vector<std::size_t> counts,
                   std::int64_t sequences) {
  // Each layer has min(n, m) values: n for full attention, k for Linformer.
  std::vector<std::size_t> values;
  for (const auto& heads : models[0].layers) values.push_back(heads[0].cumulative.size());
  const std::size_t most = *std::max_element(values.begin(), values.end());
  std::erase_if(counts, [&](std::size_t k) { return k > most; });  // 1 by definition
  std::string of = std::to_string(most);
  if (std::any_of(values.begin(), values.end(), [&](std::size_t v) { return v != most; })) {
    of = "each layer's";
    for (std::size_t l = 0; l < values.size(); ++l) {
      of += (l ? ", " : " (") + std::to_string(values[l]);
    }
    of += ")";
  }
  std::printf(
      "share of the singular-value mass in the first k of %s values (mean over %lld "
      "sequence%s):\n",
      of.c_str(), static_cast<long long>(sequences), sequences == 1 ? "" : "s");
  std::printf("%-10s %5s %4s", "model", "layer", "head");
  for (std::size_t k : counts) std::printf(" %7s", ("k=" + std::to_string(k)).c_str());
  std::printf("\n");
  for (const nn::NamedSpectra& model : models) {
    for (std::size_t l = 0; l < model.layers.size(); ++l) {
      for (std::size_t h = 0; h < model.layers[l].size(); ++h) {
        std::printf("%-10s %5zu %4zu", model.name.c_str(), l, h);
        for (std::size_t k : counts) {
          std::printf(" %7.3f", nn::mass_in_first(model.layers[l][h], k));
        }
        std::printf("\n");
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::optional<Options> parsed = parse_options(argc, argv);
    if (!parsed) return 0;  // --help
    Options& o = *parsed;
    train::RunFlags run;
    run.device = o.device;
    run.threads = o.threads;
    const Device device = train::setup_device(run);
    const Models models = open_models(o, device);  // also settles --seq-len
    // Every file written under --out, checked before any work: none may be an input (the
    // checkpoint, --data) or anything but a regular file or a missing path.
    const std::string spectrum_csv = (fs::path(o.out) / "spectrum.csv").string();
    const std::string spectrum_png = (fs::path(o.out) / "spectrum.png").string();
    train::check_writable(spectrum_csv, "--out");
    std::vector<nn::NamedPath> outputs = {{"--out", spectrum_csv}, {"--out", spectrum_png}};
    for (const char* prefix : {"trained", "untrained"}) {
      for (std::int64_t l = 0; l < models.config.layers; ++l) {
        outputs.push_back({"--out", (fs::path(o.out) / (std::string(prefix) + "_attention_layer" +
                                                        std::to_string(l) + ".png"))
                                        .string()});
      }
    }
    for (const nn::NamedPath& output : outputs) {
      nn::check_file_path(output.path, /*for_saving=*/true, "--out " + output.path);
    }
    nn::check_outputs_distinct({{"--checkpoint", o.checkpoint}, {"--data", o.data}}, outputs);
    std::string text;
    const Tensor tokens = input_tokens(o, text).to(device);  // [B, n]
    const std::int64_t sequences = tokens.size(0), n = tokens.size(1);
    std::printf("model: %s, %s, from %s (untrained: seed %llu)\n", nn::model_kind_name(models.kind),
                train::describe(models.config).c_str(), o.checkpoint.c_str(),
                static_cast<unsigned long long>(models.seed));
    std::printf("input: %lld sequence%s of %lld bytes from %s\n", static_cast<long long>(sequences),
                sequences == 1 ? "" : "s", static_cast<long long>(n),
                o.data.empty() ? "--text" : o.data.c_str());

    // --- Attention maps of the first sequence, every layer, trained and untrained. ---
    const bool linformer = models.config.attention == nn::AttentionKind::linformer;
    const std::string key_label = linformer ? "compressed row" : "key position";
    const std::string quote = "\"" + excerpt(text, 40) + "\"";
    // The first sequence's bytes label the rows, and the columns of full attention's maps
    // (Linformer's columns are its compressed rows, which no single byte names).
    std::vector<std::string> byte_labels;
    for (std::int64_t id : tokens.select(0, 0).to(Device::cpu()).to_vector<std::int64_t>()) {
      byte_labels.push_back(ByteTokenizer::decode({id}));
    }
    const std::vector<std::string> key_labels =
        linformer ? std::vector<std::string>{} : byte_labels;
    std::vector<std::string> written;
    const std::vector<Tensor> trained_maps = nn::attention_maps(*models.trained, tokens);
    const std::vector<Tensor> untrained_maps = nn::attention_maps(*models.untrained, tokens);
    for (const auto& [maps, prefix] : {std::pair{&trained_maps, std::string("trained")},
                                       std::pair{&untrained_maps, std::string("untrained")}}) {
      for (std::size_t l = 0; l < maps->size(); ++l) {
        const Tensor& probs = (*maps)[l];  // [B, H, n, n or k]
        const std::string png =
            (fs::path(o.out) / (prefix + "_attention_layer" + std::to_string(l) + ".png")).string();
        const std::string title = prefix + " model, layer " + std::to_string(l) + ", " +
                                  std::to_string(n) + " x " + std::to_string(probs.size(3)) +
                                  " per head: " + quote;
        nn::plot_attention(png, probs.select(0, 0), title, key_label, byte_labels, key_labels);
        written.push_back(png);
      }
    }

    // --- Spectra over every sequence, trained against untrained. ---
    const std::vector<nn::NamedSpectra> spectra = {
        {"trained", nn::encoder_spectrum(*models.trained, tokens)},
        {"untrained", nn::encoder_spectrum(*models.untrained, tokens)}};
    write_spectrum_csv(spectrum_csv, spectra);
    nn::plot_spectra(spectrum_png, spectra,
                     "spectrum of P: " + train::describe(models.config) +
                         ", n = " + std::to_string(n) + ", mean over " + std::to_string(sequences) +
                         " sequences",
                     static_cast<std::size_t>(o.mark));
    written.push_back(spectrum_csv);
    written.push_back(spectrum_png);

    print_summary(spectra, parse_counts(o.mass_at), sequences);
    for (const std::string& file : written) std::printf("wrote %s\n", file.c_str());
    return 0;
  } catch (...) {
    return train::report_error(kProgram, std::current_exception());
  }
}
