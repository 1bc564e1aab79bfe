#pragma once
// pseval --export: a published checkpoint's weights written for what reads them next.
//   - a file (--export FILE): FILE.safetensors by its spec, or FILE.pt, a state dict;
//   - a folder (--export DIR --format ...), of a model of tools/hf_model.py's (its facts in
//     the checkpoint: the family, the LoRA adapters, the hub folder):
//       hf    the adapters merged into the base (W + alpha/r B A; a Conv1D's W + alpha/r
//             (B A)^T), no adapter left, in the hub's names, each tie once; sharded with
//             model.safetensors.index.json past 5 GB as the hub shards; config.json and the
//             tokenizer's files copied from the --init-from folder: what from_pretrained and
//             mlx_lm.load read;
//       peft  adapter_model.safetensors (base_model.model.<module>.lora_A.weight, lora_B) and
//             adapter_config.json (LORA, r, lora_alpha, target_modules, CAUSAL_LM);
//       mlx   adapters.safetensors (<module>.lora_a = A^T, lora_b = B^T, under mlx-lm's module
//             names) and the adapter_config.json that mlx_lm.lora writes.
// Every safetensors file carries "format": "pt". The target is checked before anything is
// read: a FIFO, a device node, a folder that is not there, a published checkpoint and a name
// of no format are refused (ConfigError); a folder is made whole in a temporary one, then
// renamed into place.
#include "launcher/Cli.h"

namespace pstrain::launcher {

void exportWeights(const EvalCommand& cmd);

}  // namespace pstrain::launcher
