/*
 * fuzz_rng.h - the fuzz drivers' random numbers: xorshift64, seeded through g_rng, so a run
 * is reproduced from its seed alone.
 */
#ifndef KILN_FUZZ_RNG_H_
#define KILN_FUZZ_RNG_H_

#include <stddef.h>
#include <stdint.h>

static uint64_t g_rng;

static uint64_t Next(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static size_t Below(size_t n) { return n == 0 ? 0 : (size_t)(Next() % n); }

#endif /* KILN_FUZZ_RNG_H_ */
