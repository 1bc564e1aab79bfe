#pragma once
// Server 0 of the K servers (--servers), whatever the exchange: the lead over the others'
// ranges (ServedRange.h serves each range, range 0 here).
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/exchanges/CheckpointGather.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/Ranges.h"
#include "runtime/exchanges/ServedRange.h"
#include "runtime/roles/ServerLoop.h"

namespace pstrain::exchanges {

// Server 0 of the K servers, whatever the exchange: the run's ranges, range 0 served from a
// view of the whole model's flat weights (s.messages.weights), every server's last Partial,
// each update's verdict, and the checkpoints gathered from the servers, which the
// Publisher's records read (its record source is set here). Not copied or moved: the
// Publisher holds on to it.
class ServerZero {
 public:
  // `ranges`: the exchange's (serverRanges; the rounds' roundsRanges). `messages`: range 0's
  // (ServedRange); under Elsewhere server 0 keeps the whole model's weights throughout (the
  // rounds' chain sends them whole). `updatesOnArrival`: range 0's.
  ServerZero(roles::Server& s, std::vector<KeyRange> ranges, ServedRange::Messages messages,
             bool updatesOnArrival = false);
  ServerZero(const ServerZero&) = delete;
  ServerZero& operator=(const ServerZero&) = delete;

  // Tells every other server `start`, with its range of the (resumed) weights and optimizer
  // state, and gives range 0 its state. When start.train and range 0 is Served, the memory
  // of the weights outside range 0 then goes: checkpoints and final files take them from
  // their servers (gather()).
  void start(const Start& start);

  // One update's verdict: range 0's Partial beside every other server's, and `proposed` (its
  // lr, gather and train set; apply 0: skipped without asking) decided by the admission
  // rules (roles/Admission.h) and told to every server (LeadMessages.h's decide). Sets `gradNorm` when applied.
  Verdict decide(std::int64_t step, const Verdict& proposed, double& gradNorm);
  // The verdict's update of range 0 (throws as RangeUpdate::apply), and, when applied, the
  // buffers' mean over `contributors` batches.
  void apply(const Verdict& v, std::int64_t step, int contributors);

  // The down message of update `version` to `to`: range 0 of the weights (ServedRange::
  // startWeightsTo), with the header and the rest (downTail: the buffers and shares), until
  // all is sent.
  void sendDown(const std::vector<int>& to, std::int64_t version, const std::string& context);

  ServedRange& own() { return own_; }
  int servers() const { return static_cast<int>(ranges_.size()); }
  std::vector<Partial>& partials() { return partials_; }  // by server, of the last update; [0]: range 0's
  const std::vector<Partial>& partials() const { return partials_; }

  // The whole model's weights and optimizer state, from every server's range, into what the
  // Publisher reads (CheckpointGather), until release(): `model` (s.messages.weights
  // without it) holds the weights outside range 0 meanwhile.
  void gather(const std::string& context);
  void gather(float* model, const std::string& context);
  void release() { gather_.release(); }

 private:
  roles::Server& s_;
  const std::vector<KeyRange> ranges_;
  const bool keepsWholeWeights_;  // Messages::Elsewhere
  ServedRange own_;
  std::vector<Partial> partials_;
  CheckpointGather gather_;
};

}  // namespace pstrain::exchanges
