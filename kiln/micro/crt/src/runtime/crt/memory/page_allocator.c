/*
 * page_allocator.c - the CRT's page memory manager.
 *
 * Pool layout: [manager][block table: u32 per page][free list: 2 x u32 per page][pad][pages].
 * An allocation takes ceil(n / page) whole pages. It reuses the smallest freed block that is
 * large enough (whole, without splitting, as TVM's CRT), else takes pages from the bump
 * pointer. Freeing the topmost block lowers the bump pointer (and swallows freed blocks that
 * then touch it), so a runtime that frees everything gets its whole pool back.
 * block_table[i] holds the page count of the allocation starting at page i, with kFreeBit set
 * while that block sits in the free list, and 0 for pages that start no block; Free uses it to
 * reject pointers it never handed out and double frees.
 */
#include <string.h>
#include <tvm/runtime/crt/page_allocator.h>

static const uint32_t kFreeBit = 0x80000000u;

typedef struct {
  uint32_t start;
  uint32_t num_pages;
} FreeBlock;

typedef struct {
  MemoryManagerInterface interface; /* first, so the interface pointer is the manager */
  uint8_t* pages;
  size_t page_size_log2;
  uint32_t num_pages;
  uint32_t bump;
  uint32_t* block_table;
  FreeBlock* free_list; /* ascending by num_pages */
  uint32_t free_count;
} PageMemoryManager;

static void FreeListRemove(PageMemoryManager* mgr, uint32_t pos) {
  memmove(&mgr->free_list[pos], &mgr->free_list[pos + 1],
          (mgr->free_count - pos - 1) * sizeof(FreeBlock));
  mgr->free_count--;
}

static tvm_crt_error_t PageAllocate(MemoryManagerInterface* interface, size_t num_bytes,
                                    DLDevice dev, void** out_ptr) {
  PageMemoryManager* mgr = (PageMemoryManager*)interface;
  size_t page_size = (size_t)1 << mgr->page_size_log2;
  size_t want;
  uint32_t pos;
  (void)dev;
  *out_ptr = NULL;
  if (num_bytes > (size_t)mgr->num_pages << mgr->page_size_log2) return kTvmErrorPlatformNoMemory;
  want = num_bytes == 0 ? 1 : (num_bytes + page_size - 1) >> mgr->page_size_log2;
  for (pos = 0; pos < mgr->free_count; ++pos) {
    if (mgr->free_list[pos].num_pages >= want) {
      uint32_t start = mgr->free_list[pos].start;
      FreeListRemove(mgr, pos);
      mgr->block_table[start] &= ~kFreeBit;
      *out_ptr = mgr->pages + ((size_t)start << mgr->page_size_log2);
      mgr->interface.vleak_size++;
      return kTvmErrorNoError;
    }
  }
  if (want > (size_t)(mgr->num_pages - mgr->bump)) return kTvmErrorPlatformNoMemory;
  mgr->block_table[mgr->bump] = (uint32_t)want;
  *out_ptr = mgr->pages + ((size_t)mgr->bump << mgr->page_size_log2);
  mgr->bump += (uint32_t)want;
  mgr->interface.vleak_size++;
  return kTvmErrorNoError;
}

static tvm_crt_error_t PageFree(MemoryManagerInterface* interface, void* ptr, DLDevice dev) {
  PageMemoryManager* mgr = (PageMemoryManager*)interface;
  uint8_t* p = (uint8_t*)ptr;
  size_t offset;
  uint32_t start, num_pages, pos;
  int absorbed;
  (void)dev;
  if (p < mgr->pages || p >= mgr->pages + ((size_t)mgr->bump << mgr->page_size_log2)) {
    return kTvmErrorFunctionCallInvalidArg;
  }
  offset = (size_t)(p - mgr->pages);
  start = (uint32_t)(offset >> mgr->page_size_log2);
  num_pages = mgr->block_table[start];
  if ((offset & (((size_t)1 << mgr->page_size_log2) - 1)) != 0 || num_pages == 0 ||
      (num_pages & kFreeBit) != 0) {
    return kTvmErrorFunctionCallInvalidArg; /* not a block start, or already free */
  }
  mgr->interface.vleak_size--;
  if (start + num_pages == mgr->bump) {
    mgr->block_table[start] = 0;
    mgr->bump = start;
    /* Freed blocks that now end at the top go back to the bump region too. */
    do {
      absorbed = 0;
      for (pos = 0; pos < mgr->free_count; ++pos) {
        FreeBlock b = mgr->free_list[pos];
        if (b.start + b.num_pages == mgr->bump) {
          FreeListRemove(mgr, pos);
          mgr->block_table[b.start] = 0;
          mgr->bump = b.start;
          absorbed = 1;
          break;
        }
      }
    } while (absorbed);
    return kTvmErrorNoError;
  }
  for (pos = mgr->free_count; pos > 0 && mgr->free_list[pos - 1].num_pages > num_pages; --pos) {
    mgr->free_list[pos] = mgr->free_list[pos - 1];
  }
  mgr->free_list[pos].start = start;
  mgr->free_list[pos].num_pages = num_pages;
  mgr->free_count++;
  mgr->block_table[start] = num_pages | kFreeBit;
  return kTvmErrorNoError;
}

static uintptr_t AlignUp(uintptr_t value, uintptr_t align) {
  return (value + align - 1) & ~(align - 1);
}

tvm_crt_error_t PageMemoryManagerCreate(MemoryManagerInterface** manager, uint8_t* memory_pool,
                                        size_t memory_pool_size_bytes,
                                        size_t page_size_bytes_log2) {
  uintptr_t base = (uintptr_t)memory_pool;
  uintptr_t end = base + memory_pool_size_bytes;
  uintptr_t mgr_at = AlignUp(base, sizeof(uint64_t));
  size_t page_size;
  uintptr_t page_align;
  size_t per_page = sizeof(uint32_t) + sizeof(FreeBlock);
  size_t num_pages;
  PageMemoryManager* mgr;
  uintptr_t meta_at, pages_at;
  if (page_size_bytes_log2 < 4 || page_size_bytes_log2 > 20) {
    return kTvmErrorFunctionCallInvalidArg;
  }
  page_size = (size_t)1 << page_size_bytes_log2;
  page_align = page_size < 64 ? page_size : 64;
  if (end < base || mgr_at + sizeof(PageMemoryManager) + page_align > end) {
    return kTvmErrorPlatformNoMemory;
  }
  meta_at = mgr_at + sizeof(PageMemoryManager);
  /* Estimate, then back off until the metadata, padding and pages all fit. */
  num_pages = (size_t)(end - meta_at) / (page_size + per_page);
  if (num_pages > 0x7fffffffu) num_pages = 0x7fffffffu;
  while (num_pages > 0) {
    pages_at = AlignUp(meta_at + num_pages * per_page, page_align);
    if (pages_at + num_pages * page_size <= end) break;
    --num_pages;
  }
  if (num_pages == 0) return kTvmErrorPlatformNoMemory;
  mgr = (PageMemoryManager*)mgr_at;
  memset(mgr, 0, sizeof(*mgr));
  mgr->interface.Allocate = &PageAllocate;
  mgr->interface.Free = &PageFree;
  mgr->page_size_log2 = page_size_bytes_log2;
  mgr->num_pages = (uint32_t)num_pages;
  mgr->block_table = (uint32_t*)meta_at;
  mgr->free_list = (FreeBlock*)(meta_at + num_pages * sizeof(uint32_t));
  mgr->pages = (uint8_t*)AlignUp(meta_at + num_pages * per_page, page_align);
  memset(mgr->block_table, 0, num_pages * sizeof(uint32_t));
  *manager = &mgr->interface;
  return kTvmErrorNoError;
}
