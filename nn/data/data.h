// Data utilities in one include: tokenizer, corpus loading, batching, masked LM, the resumable
// loader and the ListOps task.
#pragma once

#include "nn/data/batching.h"
#include "nn/data/data_rng.h"
#include "nn/data/listops.h"
#include "nn/data/listops_file.h"
#include "nn/data/loader.h"
#include "nn/data/mlm.h"
#include "nn/data/text_corpus.h"
#include "nn/data/tokenizer.h"
