// Inspection for teaching: every layer's attention probabilities P, per head, from one forward
// pass (the heat maps of examples/inspect_attention, and the input of the spectrum).
#pragma once

#include <vector>

#include "nn/causal_lm.h"
#include "nn/encoder.h"
#include "nn/models.h"

namespace tinyformer::nn {

// Runs `encoder` on x ([B, n, d_model]) without recording a graph, with every attention layer
// keeping its probabilities, and returns them in layer order: [B, H, n, n] for full attention,
// [B, H, n, k] for Linformer (k compressed rows as keys; a row that covers no real position has
// weight 0). Padded keys get weight 0; padded queries keep their rows (see attention_spectrum).
// The encoder runs in the mode it is in (train or eval).
std::vector<Tensor> encoder_attention(TransformerEncoder& encoder, const Tensor& x,
                                      const Tensor& key_padding_mask = {});

// The same from tokens ([B, n] int64) through a model's embedding and encoder. The model runs in
// evaluation mode (no dropout, so the maps are those of inference) and is left in the mode it
// was in. A MaskedLM or SequenceClassifier runs only its TokenEncoder: the heads after the
// encoder change no attention.
std::vector<Tensor> attention_maps(TokenEncoder& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask = {});
std::vector<Tensor> attention_maps(MaskedLM& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask = {});
std::vector<Tensor> attention_maps(SequenceClassifier& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask = {});
// A CausalLM's maps are causal: [B, H, n, n], zero above the diagonal.
std::vector<Tensor> attention_maps(CausalLM& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask = {});
// Any of the model classes above, by its dynamic type (what nn::load_model returns); an Error
// naming the type for another module.
std::vector<Tensor> attention_maps(Module& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask = {});

}  // namespace tinyformer::nn
