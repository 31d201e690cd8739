// TG_ALSO_FOR_AVX2: put before a function whose loops are worth compiling
// for wider SIMD.
//
// With GCC on x86-64 Linux the function is compiled for plain x86-64 (SSE2, 4
// floats per instruction), for AVX2 (8) and for AVX-512 (16), and the program
// loader picks the widest the CPU can run (target_clones). All versions give
// the same bits: the build turns off contracting a * b + c into a fused
// multiply-add (-ffp-contract=off in meson.build), which AVX2 and AVX-512
// machines have and which rounds once where the plain code rounds twice, so
// every version does the same operations in the same order; the tests compare
// them with plain loops. Elsewhere the function is compiled once, as written;
// so it is under ThreadSanitizer, as the loader runs the picking code before
// TSan has started.
//
// The call goes through the loader's choice, so it is not inlined: put it on a
// function that does a whole row or more per call.
#pragma once

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define TG_ALSO_FOR_AVX2 __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TG_ALSO_FOR_AVX2
#endif
