#pragma once
// The runner's generation and evaluation loops, one file each (include just the one you need):
//   sampling_config.hpp  SamplingConfig, make_chain, BOS / EOS, GenerateStats (shared by all)
//   generate.hpp         plain sampling: prefill, then one decode step per token
//   beam.hpp             beam search (one cache per live beam)
//   contrastive.hpp      contrastive search (look-ahead along the top-k candidates)
//   speculative.hpp      speculative decoding (a draft model or the target's first layers)
//   prompt_batch.hpp     a batch of prompts with prefix reuse over a paged block pool
//   eval.hpp             teacher-forced perplexity under a cache policy
//   serve.hpp            continuous batching over a request trace (inferkit's Scheduler)
// Each is a short loop of inferkit calls around the one model and forward pass of llama2c.hpp.
// This header includes the first seven (serve.hpp brings the batched forward and the trace
// parser along, so it is included on its own).

#include "beam.hpp"
#include "contrastive.hpp"
#include "eval.hpp"
#include "generate.hpp"
#include "prompt_batch.hpp"
#include "sampling_config.hpp"
#include "speculative.hpp"
