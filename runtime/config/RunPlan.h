#pragma once
// A run as start-up resolved it: the flags as the user gave them (the TrainConfig it is,
// never changed once parsed) and what start-up worked out from them, the model, the data,
// the checkpoint and the hosts. The launcher resolves the loss and the init file's identity
// once the model is read; training::startRun the virtual shards (rank 0's, told in the
// handshake), this host's memory choice and whether the workers hold the weights. Made
// once per rank; the roles read it (a function that needs a resolved value takes a
// RunPlan, so it cannot be given bare flags).
// Torch-free.
#include <string>

#include "runtime/config/TrainConfig.h"

namespace pstrain::config {

struct RunPlan : TrainConfig {
  RunPlan() = default;
  // Nothing resolved yet: each value below answers from the flags until it is.
  explicit RunPlan(const TrainConfig& flags) : TrainConfig(flags) {}

  // --loss resolved against the model and its data (loss::lossForModel): a row of
  // config::losses(). "": not yet, lossFunction() answers by the flags.
  std::string resolvedLoss;
  // --init-from's file as this rank read it ("crc32 ..., N bytes"; "" without --init-from):
  // compared in the handshake, recorded in checkpoints, checked on --resume.
  std::string initFromIdentity;
  // The virtual shards a step's global batch is dealt to (training::startRun: --virtual-
  // shards, else the resumed checkpoint's, else the first launch's workers). 0: not yet.
  int resolvedShards = 0;
  // --memory as this rank's host runs it: auto's choice, or the flag (training::startRun:
  // Fast or Lean). Auto until then, which reads the flag (auto counting as fast).
  MemoryUse memoryChosen = MemoryUse::Auto;
  // Under lean, what auto's plan spares each of the host's ranks for more transfers in
  // flight (MiB): its share of the room left under half the host's memory (0: lean's least,
  // and always with --memory lean as given). See MemoryPolicy.
  double leanSpareMib = 0;
  // diloco with one server, not resumed: every worker's initial weights are rank 0's bit for
  // bit (training::startRun, by their CRCs in the handshake), so that the first down message
  // need not carry them (exchanges/rounds/RoundChain).
  bool workersHoldWeights = false;

  // The loss the workers train with: resolvedLoss, else --loss, else auto's choice by the
  // model's name alone (defaultLoss).
  std::string lossFunction() const;
  // The virtual shards of the run: resolvedShards, else --virtual-shards, else `workers`
  // (one each).
  int virtualShardCount(int workers) const;
  // Whether this rank gives the pages of what it has sent back at once and keeps few
  // transfers in flight (its host's memory choice is lean): see MemoryPolicy.
  bool leanMemory() const;

  // The flags that would say this run with nothing left to resolve: the resolved loss and
  // virtual shards written in. What the fingerprint, the handshake and run.json read.
  TrainConfig explicitFlags() const;
  // 16 hex digits identifying explicitFlags()' fingerprint fields (config/Flags.h): equal
  // fingerprints mean the same training. Recorded in every checkpoint, compared on --resume.
  std::string fingerprint() const;
};

// --loss auto's choice where nothing but the model's name is known: cross-entropy on the
// outputs (logits) of a model file, nll for the zoo's (their outputs are log-probabilities).
std::string defaultLoss(const std::string& model);

}  // namespace pstrain::config
