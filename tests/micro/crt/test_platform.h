/* test_platform.h - controls of the test platform (test_platform.c). */
#ifndef KILN_CRT_TEST_PLATFORM_H_
#define KILN_CRT_TEST_PLATFORM_H_

#include <stddef.h>

/* Most bytes live at once; allocations beyond it fail with kTvmErrorPlatformNoMemory. */
void TestPlatform_SetBudget(size_t bytes);

/* Blocks allocated and not yet freed. */
int TestPlatform_LiveAllocations(void);

#endif /* KILN_CRT_TEST_PLATFORM_H_ */
