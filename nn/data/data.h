// Data utilities in one include: tokenizer, corpus loading, batching, masked LM, the resumable
// loader, the ListOps task and balanced brackets.
#pragma once

#include "nn/data/batching.h"
#include "nn/data/brackets.h"
#include "nn/data/data_rng.h"
#include "nn/data/listops.h"
#include "nn/data/listops_file.h"
#include "nn/data/loader.h"
#include "nn/data/mlm.h"
#include "nn/data/text_corpus.h"
#include "nn/data/tokenizer.h"
