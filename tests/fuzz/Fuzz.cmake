# The libFuzzer targets (clang only): each links the reader it fuzzes, compiled from source
# with ASan + UBSan + fuzzer instrumentation. Built by tools/fuzz with -DPSTRAIN_FUZZ=ON.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "PSTRAIN_FUZZ needs clang (CXX=clang++)")
endif()
set(PSTRAIN_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined
                       -fno-omit-frame-pointer -g -O1)
# Every source in the whole fuzz build: large storages of 64 bytes or more, not 1 MiB. The
# fuzzers' inputs (64 KiB at most) have some, so that a model's image leaves them out as it
# does a real model's (models/ModelFile.h); one value for every file that includes it.
add_compile_definitions(PSTRAIN_LARGE_STORAGE_BYTES=64)

# The readers and what they call, each compiled once for every fuzzer (static libraries: a
# fuzzer links only the files it calls). The libtorch ones share one precompiled
# <torch/torch.h> (clang's, made here), as the main build shares gcc's.
function(pstrain_fuzz_library name)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PUBLIC ${PSTRAIN_FUZZ_FLAGS})
  target_link_options(${name} PUBLIC ${PSTRAIN_FUZZ_FLAGS})
  target_link_libraries(${name} PUBLIC fmt::fmt ZLIB::ZLIB)
endfunction()
file(GLOB PSTRAIN_CONFIG_SOURCES ${PROJECT_SOURCE_DIR}/runtime/config/*.cpp)  # the registry's names
pstrain_fuzz_library(fuzz_readers data/Idx.cpp data/Cifar.cpp data/Npz.cpp data/TokenFile.cpp
  runtime/protocol/Handshake.cpp runtime/protocol/StepProtocol.cpp runtime/comm/Doorbell.cpp runtime/net/Interfaces.cpp
  runtime/zip/ArchiveCheck.cpp runtime/zip/Json.cpp runtime/zip/Pickle.cpp runtime/zip/ZipDirectory.cpp runtime/zip/ZipWriter.cpp
  runtime/checkpoint/Safetensors.cpp runtime/metrics/Json.cpp runtime/Portable.cpp
  runtime/Process.cpp runtime/rundir/AtomicFile.cpp runtime/rundir/ReadFile.cpp runtime/rundir/RunFiles.cpp
  ${PSTRAIN_CONFIG_SOURCES})
pstrain_fuzz_library(fuzz_torch_readers runtime/checkpoint/Checkpoint.cpp runtime/checkpoint/WeightsFile.cpp models/ModelFile.cpp models/ModelFileGuard.cpp models/ScriptModel.cpp
  models/Registry.cpp models/ResNet.cpp models/StateDict.cpp models/Vgg.cpp)
target_link_libraries(fuzz_torch_readers PUBLIC ${TORCH_LIBRARIES})  # and fuzz_readers, by each fuzzer (below)
target_precompile_headers(fuzz_torch_readers PRIVATE <torch/torch.h>)

# The two libraries build side by side: the torch one does not depend on the other, but
# its files call it, so a fuzzer links it after (static libraries link in order).
function(pstrain_fuzzer name)
  add_executable(${name} tests/fuzz/${name}.cpp)
  target_link_libraries(${name} PRIVATE ${ARGN} fuzz_readers)
endfunction()
pstrain_fuzzer(fuzz_idx)
pstrain_fuzzer(fuzz_cifar)
pstrain_fuzzer(fuzz_wire)
pstrain_fuzzer(fuzz_npz)
pstrain_fuzzer(fuzz_tokens)
pstrain_fuzzer(fuzz_checkpoint fuzz_torch_readers)
pstrain_fuzzer(fuzz_model fuzz_torch_readers)
pstrain_fuzzer(fuzz_image fuzz_torch_readers)
pstrain_fuzzer(fuzz_weights fuzz_torch_readers)
pstrain_fuzzer(fuzz_shards fuzz_torch_readers)
target_precompile_headers(fuzz_model REUSE_FROM fuzz_torch_readers)
