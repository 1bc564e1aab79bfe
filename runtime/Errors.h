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

// Bad flags or configuration.
struct ConfigError : Error {
  using Error::Error;
};

// A ConfigError that every rank raises at the same point of the protocol (ranks that
// disagree in the handshake, a world without workers): the launcher can end every rank
// cleanly, printing once, instead of aborting the job.
struct CollectiveConfigError : ConfigError {
  using ConfigError::ConfigError;
};

// Missing, truncated or garbled dataset files.
struct DataError : Error {
  using Error::Error;
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
