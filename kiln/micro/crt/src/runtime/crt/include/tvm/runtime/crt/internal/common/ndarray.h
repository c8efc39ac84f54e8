/*
 * ndarray.h - CRT NDArrays and TVM's NDArray blob format (internal to the kiln CRT).
 *
 * Blob layout (little endian, as tvm.runtime.save_param_dict writes): u64 magic
 * 0xDD5E40F096B4A13F, u64 reserved, DLDevice {i32 type, i32 id}, i32 ndim, DLDataType
 * {u8 code, u8 bits, u16 lanes}, i64 shape[ndim], i64 data_byte_size, the bytes.
 */
#ifndef TVM_RUNTIME_CRT_INTERNAL_COMMON_NDARRAY_H_
#define TVM_RUNTIME_CRT_INTERNAL_COMMON_NDARRAY_H_

#include <dlpack/dlpack.h>
#include <tvm/runtime/c_backend_api.h>
#include <tvm/runtime/c_runtime_api.h>

#include "crt_config.h"

#ifdef __cplusplus
extern "C" {
#endif

static const uint64_t kTVMNDArrayMagic = 0xDD5E40F096B4A13FULL;
static const uint64_t kTVMNDArrayListMagic = 0xF7E58D4F05049CB7ULL;

/* A DLTensor that owns (or views) its data. dl_tensor must stay the first member. */
typedef struct TVMNDArray {
  DLTensor dl_tensor;
  /* Owners of the data; the data is freed when this drops to 0. */
  uint32_t reference_count;
  /* The shape storage dl_tensor.shape points to (no separate allocation needed). */
  int64_t shape_storage[TVM_CRT_MAX_NDIM];
} TVMNDArray;

/*
 * Fill `array` for ndim/shape/dtype without data. ndim must be 0..TVM_CRT_MAX_NDIM, every
 * dimension >= 0 and lanes == 1; otherwise kTvmErrorFunctionCallInvalidArg with a message.
 */
int TVMNDArray_Create(int32_t ndim, const tvm_index_t* shape, DLDataType dtype, DLDevice dev,
                      TVMNDArray* array);

/* Bytes of data: (bits + 7) / 8 * lanes * elements; -1 if that overflows. */
int64_t TVMNDArray_DataSizeBytes(TVMNDArray* array);

/* Fill the data with random bytes from TVMPlatformGenerateRandom. */
int TVMNDArray_RandomFill(TVMNDArray* array);

/* TVMNDArray_Create plus data from TVMPlatformMemoryAllocate (reference_count = 1). */
int TVMNDArray_Empty(int32_t ndim, const tvm_index_t* shape, DLDataType dtype, DLDevice dev,
                     TVMNDArray* array);

/*
 * Read one NDArray blob from *strm, never reading at or past strm_end, into a new array
 * (TVMNDArray_Empty); advance *strm past it. Unlike TVM's unbounded two-argument version this
 * takes the end of the buffer: every length is checked against the bytes present.
 */
int TVMNDArray_Load(TVMNDArray* ret, const char** strm, const char* strm_end);

/*
 * Write the NDArray blob of `array` (compact, CPU) into out[0 .. out_size); *written gets the
 * blob's size. kTvmErrorBufferTooSmall (with the size needed in *written) if it does not fit.
 */
int TVMNDArray_Save(const TVMNDArray* array, char* out, size_t out_size, size_t* written);

/* A view of arr's data with another shape/dtype of at most the same byte size. */
int TVMNDArray_CreateView(TVMNDArray* arr, const tvm_index_t* shape, int32_t ndim, DLDataType dtype,
                          TVMNDArray* array_view);

void TVMNDArray_IncrementReference(TVMNDArray* arr);
uint32_t TVMNDArray_DecrementReference(TVMNDArray* arr);

/* Drop one reference; frees the data when none remain. */
int TVMNDArray_Release(TVMNDArray* arr);

/*
 * A reader over a params blob (TVM's SaveParams format): u64 magic 0xF7E58D4F05049CB7,
 * u64 reserved, u64 name count, each name as u64 length + bytes, u64 array count (equal to
 * the name count), then one NDArray blob per name.
 */
typedef struct TVMParamsReader {
  const char* names;   /* next name's length field */
  const char* arrays;  /* next NDArray blob */
  const char* end;     /* one past the blob */
  uint64_t count;      /* number of (name, array) pairs */
  uint64_t index;      /* pairs read so far */
} TVMParamsReader;

/*
 * Check the header and every name length against the `size` bytes at `blob`, and position
 * the reader on the first pair. kTvmErrorFunctionCallInvalidArg with a message if malformed.
 */
int TVMParamsReader_Init(TVMParamsReader* reader, const char* blob, size_t size);

/*
 * Read the next pair: copy the name into name_out (a name that does not fit name_size is an
 * error naming TVM_CRT_MAX_STRLEN_PARAM_NAME, never truncated) and load the array into a new
 * TVMNDArray (release it with TVMNDArray_Release). Returns 1 when a pair was read, 0 at the
 * end, and an error code (always > 1, message set) for malformed data.
 */
int TVMParamsReader_Next(TVMParamsReader* reader, char* name_out, size_t name_size,
                         TVMNDArray* array_out);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_INTERNAL_COMMON_NDARRAY_H_ */
