#pragma once
// Error types of pstrain. Every message says what went wrong, where (file, rank, step,
// field) and, where it helps, what to do. `main` prints them once per rank as
// "pstrain: rank R: <message>" and ends the job.
#include <stdexcept>
#include <string>

namespace pstrain {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Input the user must change, which no retry mends: a refusal. The programs exit with 2
// on it (pstrain-run then does not relaunch), 1 on any other error.
struct InputError : Error {
  using Error::Error;
};

// Bad flags or configuration (a checkpoint that does not fit them among it).
struct ConfigError : InputError {
  using InputError::InputError;
};

// Throws ConfigError(message) unless `ok`: the checks of flags and configurations.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(message);
}

// A broken promise of pstrain's own (a switch that met a value its table does not have, a
// call out of its order): never the user's doing, whatever the input. The message says so
// and asks for a report.
struct InternalError : Error {
  explicit InternalError(const std::string& what)
      : Error("internal error: " + what +
              " (a bug in pstrain, not in your command or data: please report it with the command line)") {}
};

// A ConfigError that every rank raises at the same point of the protocol (ranks that
// disagree in the handshake, a world without workers): the launcher can end every rank
// cleanly, printing once, instead of aborting the job.
struct CollectiveConfigError : ConfigError {
  using ConfigError::ConfigError;
};

// Missing, truncated or garbled dataset files.
struct DataError : InputError {
  using InputError::InputError;
};

// A collective that failed or timed out, or a peer that went away.
struct CommError : Error {
  using Error::Error;
};

// A payload that does not decode as what its receiver expects (garbled, another codec or
// other shapes).
struct CodecError : CommError {
  using CommError::CommError;
};

// A checkpoint that cannot be written, or read back as what it claims to be.
struct CheckpointError : Error {
  using Error::Error;
};

}  // namespace pstrain
