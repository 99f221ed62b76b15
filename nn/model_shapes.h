// The state dict a model description implies: every entry's name and shape, from the description
// alone, so that a file's tensors are checked against it before the model is built (load_model).
//
//   nn::ModelShapes s = nn::model_shapes(description);
//   s.tensors[0].name, s.tensors[0].shape, s.tensors[0].from  // "decoder_bias", [260], ...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"
#include "nn/models.h"

namespace tinyformer::nn {

struct ExpectedTensor {
  std::string name;  // as state_dict() names it: "body.encoder.layers.0.attention.q_proj.weight"
  Shape shape;
  // The description's fields its shape comes from: "encoder.d_ff, encoder.d_model".
  std::string from;
};

struct ModelShapes {
  // The entries of the built-in parts, in state_dict() order.
  std::vector<ExpectedTensor> tensors;
  // Where parts of one's own sit ("body.encoder.layers.1.feed_forward."): block parts and
  // projection kinds registered by the program, or built-in names it replaced. Their entries
  // are known only by building them; every state-dict entry under one of these prefixes is
  // theirs.
  std::vector<std::string> own_parts;
};

// What make_model(description) would hold, without allocating a tensor. Throws an Error for an
// invalid description, as make_model does. Its size is the model's, a few entries per layer: a
// caller with an untrusted description bounds encoder.layers first (load_model bounds it by the
// layers a file's tensors name).
ModelShapes model_shapes(const ModelDescription& description);

}  // namespace tinyformer::nn
