# The libFuzzer targets (clang only): each compiles the reader it fuzzes from source with
# ASan + UBSan + fuzzer instrumentation. Built by tools/fuzz with -DPSTRAIN_FUZZ=ON.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "PSTRAIN_FUZZ needs clang (CXX=clang++)")
endif()
set(PSTRAIN_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined
                       -fno-omit-frame-pointer -g -O1)
function(pstrain_fuzzer name)
  add_executable(${name} tests/fuzz/${name}.cpp ${ARGN})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${PSTRAIN_FUZZ_FLAGS})
  target_link_options(${name} PRIVATE ${PSTRAIN_FUZZ_FLAGS})
  target_link_libraries(${name} PRIVATE fmt::fmt ZLIB::ZLIB)
endfunction()
pstrain_fuzzer(fuzz_idx data/Idx.cpp runtime/Portable.cpp)
pstrain_fuzzer(fuzz_cifar data/Cifar.cpp)
pstrain_fuzzer(fuzz_wire runtime/protocol/Handshake.cpp runtime/protocol/StepProtocol.cpp runtime/comm/Doorbell.cpp
               runtime/net/Interfaces.cpp)
pstrain_fuzzer(fuzz_checkpoint runtime/checkpoint/Checkpoint.cpp runtime/zip/ArchiveCheck.cpp runtime/Portable.cpp
               runtime/rundir/AtomicFile.cpp runtime/rundir/ReadFile.cpp runtime/rundir/RunFiles.cpp runtime/zip/ZipDirectory.cpp
               runtime/zip/ZipWriter.cpp)
target_link_libraries(fuzz_checkpoint PRIVATE ${TORCH_LIBRARIES})
pstrain_fuzzer(fuzz_npz data/Npz.cpp runtime/zip/ZipDirectory.cpp)
pstrain_fuzzer(fuzz_tokens data/TokenFile.cpp data/Npz.cpp runtime/zip/ZipDirectory.cpp)
file(GLOB PSTRAIN_CONFIG_SOURCES ${PROJECT_SOURCE_DIR}/runtime/config/*.cpp)  # the registry's names
pstrain_fuzzer(fuzz_model models/ModelFile.cpp models/ScriptModel.cpp models/Registry.cpp models/ResNet.cpp models/Vgg.cpp
               runtime/zip/ArchiveCheck.cpp runtime/zip/ZipDirectory.cpp runtime/Portable.cpp runtime/Process.cpp
               runtime/rundir/ReadFile.cpp
               ${PSTRAIN_CONFIG_SOURCES})
target_link_libraries(fuzz_model PRIVATE ${TORCH_LIBRARIES})
# Large storages of 64 bytes or more, not 1 MiB: the fuzzer's inputs (64 KiB at most) have
# some, so that the image leaves them out as it does a real model's (models/ModelFile.h).
target_compile_definitions(fuzz_model PRIVATE PSTRAIN_LARGE_STORAGE_BYTES=64)
pstrain_fuzzer(fuzz_image models/ModelFile.cpp runtime/zip/ArchiveCheck.cpp runtime/zip/ZipDirectory.cpp
               runtime/Portable.cpp runtime/rundir/ReadFile.cpp)
target_link_libraries(fuzz_image PRIVATE ${TORCH_LIBRARIES})
target_compile_definitions(fuzz_image PRIVATE PSTRAIN_LARGE_STORAGE_BYTES=64)
