/*
 * ndarray.c - CRT NDArrays: creation, views, reference counts, and the NDArray blob format
 * (load with every length checked against the buffer, save).
 */
#include <string.h>
#include <tvm/runtime/crt/internal/common/crt_error.h>
#include <tvm/runtime/crt/internal/common/ndarray.h>
#include <tvm/runtime/crt/platform.h>

int TVMNDArray_Create(int32_t ndim, const tvm_index_t* shape, DLDataType dtype, DLDevice dev,
                      TVMNDArray* array) {
  int32_t i;
  memset(array, 0, sizeof(*array));
  if (ndim < 0 || ndim > TVM_CRT_MAX_NDIM) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "tensor rank %ld is outside 0..%d (TVM_CRT_MAX_NDIM)", (long)ndim,
                       TVM_CRT_MAX_NDIM);
  }
  if (dtype.lanes != 1 || dtype.bits == 0) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "unsupported tensor dtype (code %u, bits %u, lanes %u)",
                       (unsigned)dtype.code, (unsigned)dtype.bits, (unsigned)dtype.lanes);
  }
  for (i = 0; i < ndim; ++i) {
    if (shape[i] < 0) {
      return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "negative dimension %ld in shape",
                         (long)shape[i]);
    }
    array->shape_storage[i] = shape[i];
  }
  array->dl_tensor.ndim = ndim;
  array->dl_tensor.shape = array->shape_storage;
  array->dl_tensor.dtype = dtype;
  array->dl_tensor.device = dev;
  return 0;
}

int64_t TVMNDArray_DataSizeBytes(TVMNDArray* array) {
  const DLTensor* t = &array->dl_tensor;
  /* Bound every step so a hostile shape cannot overflow: 2^62 is far beyond any memory. */
  const int64_t kLimit = (int64_t)1 << 62;
  int64_t size = ((int64_t)t->dtype.bits * t->dtype.lanes + 7) / 8;
  int32_t i;
  for (i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0) return -1;
    if (t->shape[i] != 0 && size > kLimit / t->shape[i]) return -1;
    size *= t->shape[i];
  }
  return size;
}

int TVMNDArray_Empty(int32_t ndim, const tvm_index_t* shape, DLDataType dtype, DLDevice dev,
                     TVMNDArray* array) {
  int64_t nbytes;
  int status = TVMNDArray_Create(ndim, shape, dtype, dev, array);
  if (status != 0) return status;
  nbytes = TVMNDArray_DataSizeBytes(array);
  if (nbytes < 0 || (uint64_t)nbytes > (uint64_t)(size_t)-1) {
    return TVMCrtError(kTvmErrorPlatformNoMemory, "tensor byte size overflows");
  }
  /* Zero-byte tensors still get a valid (unique) pointer. */
  status = TVMPlatformMemoryAllocate(nbytes > 0 ? (size_t)nbytes : 1, dev, &array->dl_tensor.data);
  if (status != 0) {
    array->dl_tensor.data = NULL;
    return TVMCrtError(status, "cannot allocate %ld bytes for a tensor", (long)nbytes);
  }
  array->reference_count = 1;
  return 0;
}

/* Little-endian readers over [*p, end). They fail instead of reading past end. */
static int ReadBytes(const char** p, const char* end, void* out, size_t n) {
  if ((size_t)(end - *p) < n) return -1;
  memcpy(out, *p, n);
  *p += n;
  return 0;
}

static int ReadU64(const char** p, const char* end, uint64_t* out) {
  uint8_t b[8];
  int i;
  if (ReadBytes(p, end, b, 8) != 0) return -1;
  *out = 0;
  for (i = 7; i >= 0; --i) *out = (*out << 8) | b[i];
  return 0;
}

static int ReadU32(const char** p, const char* end, uint32_t* out) {
  uint8_t b[4];
  if (ReadBytes(p, end, b, 4) != 0) return -1;
  *out = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
  return 0;
}

#define TRUNCATED(what) \
  TVMCrtError(kTvmErrorFunctionCallInvalidArg, "NDArray blob truncated in %s", what)

int TVMNDArray_Load(TVMNDArray* ret, const char** strm, const char* strm_end) {
  const char* p = *strm;
  uint64_t magic, reserved, data_byte_size;
  uint32_t device_type, device_id, ndim_bits, dtype_bits;
  int64_t shape[TVM_CRT_MAX_NDIM];
  int32_t ndim;
  DLDataType dtype;
  DLDevice dev = {kDLCPU, 0};
  int64_t expected;
  int32_t i;
  int status;
  memset(ret, 0, sizeof(*ret));
  if (ReadU64(&p, strm_end, &magic) != 0) return TRUNCATED("magic");
  if (magic != kTVMNDArrayMagic) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "bad NDArray magic 0x%08lx%08lx, expected 0xdd5e40f096b4a13f",
                       (unsigned long)(magic >> 32), (unsigned long)(magic & 0xffffffffu));
  }
  if (ReadU64(&p, strm_end, &reserved) != 0) return TRUNCATED("reserved field");
  if (ReadU32(&p, strm_end, &device_type) != 0 || ReadU32(&p, strm_end, &device_id) != 0) {
    return TRUNCATED("device");
  }
  if (device_type != kDLCPU) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "NDArray saved with device type %lu; only CPU (1) tensors load",
                       (unsigned long)device_type);
  }
  if (ReadU32(&p, strm_end, &ndim_bits) != 0) return TRUNCATED("ndim");
  ndim = (int32_t)ndim_bits;
  if (ndim < 0 || ndim > TVM_CRT_MAX_NDIM) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "NDArray rank %ld is outside 0..%d (TVM_CRT_MAX_NDIM)", (long)ndim,
                       TVM_CRT_MAX_NDIM);
  }
  if (ReadU32(&p, strm_end, &dtype_bits) != 0) return TRUNCATED("dtype");
  dtype.code = (uint8_t)(dtype_bits & 0xffu);
  dtype.bits = (uint8_t)((dtype_bits >> 8) & 0xffu);
  dtype.lanes = (uint16_t)(dtype_bits >> 16);
  for (i = 0; i < ndim; ++i) {
    uint64_t dim;
    if (ReadU64(&p, strm_end, &dim) != 0) return TRUNCATED("shape");
    shape[i] = (int64_t)dim;
  }
  if (ReadU64(&p, strm_end, &data_byte_size) != 0) return TRUNCATED("data_byte_size");
  status = TVMNDArray_Create(ndim, shape, dtype, dev, ret);
  if (status != 0) return status;
  expected = TVMNDArray_DataSizeBytes(ret);
  if (expected < 0 || data_byte_size != (uint64_t)expected) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "NDArray data_byte_size %lu does not match its shape and dtype (%ld)",
                       (unsigned long)data_byte_size, (long)expected);
  }
  if ((uint64_t)(strm_end - p) < data_byte_size) return TRUNCATED("data");
  status = TVMNDArray_Empty(ndim, shape, dtype, dev, ret);
  if (status != 0) return status;
  memcpy(ret->dl_tensor.data, p, (size_t)data_byte_size);
  *strm = p + data_byte_size;
  return 0;
}

static void PutLE(char* out, uint64_t value, int nbytes) {
  int i;
  for (i = 0; i < nbytes; ++i) out[i] = (char)((value >> (8 * i)) & 0xffu);
}

int TVMNDArray_Save(const TVMNDArray* array, char* out, size_t out_size, size_t* written) {
  const DLTensor* t = &array->dl_tensor;
  TVMNDArray shape_only;
  int64_t nbytes;
  size_t header = 8 + 8 + 8 + 4 + 4 + 8 * (size_t)t->ndim + 8;
  int32_t i;
  int status = TVMNDArray_Create(t->ndim, t->shape, t->dtype, t->device, &shape_only);
  if (status != 0) return status;
  if (t->strides != NULL || t->device.device_type != kDLCPU) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMNDArray_Save: only compact CPU tensors can be saved");
  }
  nbytes = TVMNDArray_DataSizeBytes(&shape_only);
  if (nbytes < 0 || (uint64_t)nbytes > (uint64_t)((size_t)-1 - header)) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "TVMNDArray_Save: size overflows");
  }
  *written = header + (size_t)nbytes;
  if (*written > out_size) {
    return TVMCrtError(kTvmErrorBufferTooSmall,
                       "TVMNDArray_Save: needs %lu bytes, buffer has %lu",
                       (unsigned long)*written, (unsigned long)out_size);
  }
  PutLE(out, kTVMNDArrayMagic, 8);
  PutLE(out + 8, 0, 8);
  PutLE(out + 16, kDLCPU, 4); /* saved as a CPU tensor, as TVM does */
  PutLE(out + 20, 0, 4);
  PutLE(out + 24, (uint64_t)t->ndim, 4);
  out[28] = (char)t->dtype.code;
  out[29] = (char)t->dtype.bits;
  PutLE(out + 30, t->dtype.lanes, 2);
  for (i = 0; i < t->ndim; ++i) PutLE(out + 32 + 8 * i, (uint64_t)t->shape[i], 8);
  PutLE(out + 32 + 8 * t->ndim, (uint64_t)nbytes, 8);
  if (nbytes > 0) memcpy(out + header, (const uint8_t*)t->data + t->byte_offset, (size_t)nbytes);
  return 0;
}

int TVMNDArray_CreateView(TVMNDArray* arr, const tvm_index_t* shape, int32_t ndim, DLDataType dtype,
                          TVMNDArray* array_view) {
  int64_t view_bytes, arr_bytes;
  int status = TVMNDArray_Create(ndim, shape, dtype, arr->dl_tensor.device, array_view);
  if (status != 0) return status;
  view_bytes = TVMNDArray_DataSizeBytes(array_view);
  arr_bytes = TVMNDArray_DataSizeBytes(arr);
  if (view_bytes < 0 || arr_bytes < 0 || view_bytes > arr_bytes) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "view of %ld bytes does not fit an array of %ld bytes", (long)view_bytes,
                       (long)arr_bytes);
  }
  array_view->dl_tensor.data = arr->dl_tensor.data;
  array_view->dl_tensor.byte_offset = arr->dl_tensor.byte_offset;
  /* A view owns nothing: releasing it must not free the data. */
  array_view->reference_count = 0;
  return 0;
}

int TVMNDArray_RandomFill(TVMNDArray* arr) {
  int64_t nbytes = TVMNDArray_DataSizeBytes(arr);
  if (nbytes < 0) return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "tensor size overflows");
  return TVMPlatformGenerateRandom((uint8_t*)arr->dl_tensor.data + arr->dl_tensor.byte_offset,
                                   (size_t)nbytes);
}

void TVMNDArray_IncrementReference(TVMNDArray* arr) { arr->reference_count++; }

uint32_t TVMNDArray_DecrementReference(TVMNDArray* arr) {
  if (arr->reference_count > 0) arr->reference_count--;
  return arr->reference_count;
}

int TVMNDArray_Release(TVMNDArray* arr) {
  if (arr->reference_count == 0) return 0; /* a view, or already released */
  if (TVMNDArray_DecrementReference(arr) > 0) return 0;
  if (arr->dl_tensor.data != NULL) {
    int status = TVMPlatformMemoryFree(arr->dl_tensor.data, arr->dl_tensor.device);
    if (status != 0) return status;
    arr->dl_tensor.data = NULL;
  }
  return 0;
}

int TVMParamsReader_Init(TVMParamsReader* reader, const char* blob, size_t size) {
  const char* p = blob;
  const char* end = blob + size;
  uint64_t magic, reserved, num_names, num_arrays, i;
  memset(reader, 0, sizeof(*reader));
  if (ReadU64(&p, end, &magic) != 0) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "params blob truncated in magic");
  }
  if (magic != kTVMNDArrayListMagic) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "bad params magic 0x%08lx%08lx, expected 0xf7e58d4f05049cb7",
                       (unsigned long)(magic >> 32), (unsigned long)(magic & 0xffffffffu));
  }
  if (ReadU64(&p, end, &reserved) != 0 || ReadU64(&p, end, &num_names) != 0) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "params blob truncated in header");
  }
  reader->names = p;
  /* Each name needs at least its 8-byte length, so a larger count cannot be genuine. */
  if (num_names > (uint64_t)(end - p) / 8) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "params blob truncated: it claims %lu names but has %lu bytes left",
                       (unsigned long)num_names, (unsigned long)(end - p));
  }
  for (i = 0; i < num_names; ++i) {
    uint64_t len;
    if (ReadU64(&p, end, &len) != 0 || len > (uint64_t)(end - p)) {
      return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                         "params blob truncated in name %lu", (unsigned long)i);
    }
    p += len;
  }
  if (ReadU64(&p, end, &num_arrays) != 0) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "params blob truncated in array count");
  }
  if (num_arrays != num_names) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "params blob has %lu names but %lu arrays", (unsigned long)num_names,
                       (unsigned long)num_arrays);
  }
  reader->arrays = p;
  reader->end = end;
  reader->count = num_names;
  return 0;
}

int TVMParamsReader_Next(TVMParamsReader* reader, char* name_out, size_t name_size,
                         TVMNDArray* array_out) {
  uint64_t len;
  int status;
  if (reader->index >= reader->count) return 0;
  /* Init checked every name against the blob. */
  ReadU64(&reader->names, reader->end, &len);
  if (len >= name_size) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "param name of %lu characters exceeds the limit of %lu (raise "
                       "TVM_CRT_MAX_STRLEN_PARAM_NAME in crt_config.h)",
                       (unsigned long)len, (unsigned long)(name_size - 1));
  }
  memcpy(name_out, reader->names, (size_t)len);
  name_out[len] = '\0';
  reader->names += len;
  if (memchr(name_out, '\0', (size_t)len) != NULL) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "param name contains a NUL byte");
  }
  status = TVMNDArray_Load(array_out, &reader->arrays, reader->end);
  if (status != 0) {
    TVMNDArray_Release(array_out);
    return status;
  }
  reader->index++;
  return 1;
}
