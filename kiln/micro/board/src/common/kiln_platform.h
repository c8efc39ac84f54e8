/* What kiln's platform.c offers the program beyond tvm/runtime/crt/platform.h. */
#ifndef KILN_PLATFORM_H_
#define KILN_PLATFORM_H_

#include <stddef.h>

#ifndef KILN_PAGE_SIZE_LOG2
#define KILN_PAGE_SIZE_LOG2 8 /* 256-byte pages, as TVM's host template */
#endif

/* The most bytes live through TVMPlatformMemoryAllocate at once since initialization. */
size_t kiln_platform_heap_peak(void);

#endif /* KILN_PLATFORM_H_ */
