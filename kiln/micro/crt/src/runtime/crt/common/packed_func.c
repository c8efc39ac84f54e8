/*
 * packed_func.c - bind a packed function to its arguments, and parse dtype strings.
 */
#include <string.h>
#include <tvm/runtime/crt/internal/common/crt_error.h>
#include <tvm/runtime/crt/packed_func.h>

/* Read a decimal number of at most 5 digits at *s; -1 when there is none. */
static long ParseSmallNumber(const char** s) {
  long value = 0;
  int digits = 0;
  while (**s >= '0' && **s <= '9') {
    if (++digits > 5) return -1;
    value = value * 10 + (**s - '0');
    ++*s;
  }
  return digits == 0 ? -1 : value;
}

int TVMParseDLDataType(const char* s, DLDataType* out) {
  static const struct {
    const char* prefix;
    uint8_t code;
    uint8_t default_bits;
  } kKinds[] = {
      {"bfloat", kDLBfloat, 16}, {"float", kDLFloat, 32}, {"uint", kDLUInt, 32},
      {"int", kDLInt, 32},       {"handle", kDLOpaqueHandle, 64},
  };
  const char* cursor = s;
  size_t k;
  long bits = -1;
  long lanes = 1;
  if (strcmp(s, "bool") == 0) {
    out->code = kDLUInt;
    out->bits = 1;
    out->lanes = 1;
    return 0;
  }
  for (k = 0; k < sizeof(kKinds) / sizeof(kKinds[0]); ++k) {
    size_t n = strlen(kKinds[k].prefix);
    if (strncmp(s, kKinds[k].prefix, n) == 0) {
      cursor = s + n;
      bits = *cursor == '\0' ? kKinds[k].default_bits : ParseSmallNumber(&cursor);
      break;
    }
  }
  if (bits > 0 && *cursor == 'x') {
    ++cursor;
    lanes = ParseSmallNumber(&cursor);
  }
  if (bits <= 0 || bits > 255 || lanes <= 0 || lanes > 65535 || *cursor != '\0') {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "invalid dtype string '%s'", s);
  }
  out->code = kKinds[k].code;
  out->bits = (uint8_t)bits;
  out->lanes = (uint16_t)lanes;
  return 0;
}

DLDataType String2DLDataType(const char* s) {
  DLDataType t = {kDLOpaqueHandle, 0, 0};
  if (TVMParseDLDataType(s, &t) != 0) {
    t.code = kDLOpaqueHandle;
    t.bits = 0;
    t.lanes = 0;
  }
  return t;
}

TVMArgs TVMArgs_Create(TVMValue* values, uint32_t* tcodes, uint32_t values_count) {
  TVMArgs args;
  uint32_t i;
  if (values_count > TVM_CRT_MAX_ARGS) TVMPlatformAbort(kTvmErrorFunctionCallNumArguments);
  memset(&args, 0, sizeof(args));
  for (i = 0; i < values_count; ++i) {
    args.values[i] = values[i];
    args.tcodes[i] = (int)tcodes[i];
  }
  args.values_count = values_count;
  return args;
}

int TVMPackedFunc_Call(TVMPackedFunc* pf) {
  pf->ret_value.values_count = 1;
  return TVMFuncCall(pf->fexec, pf->args.values, pf->args.tcodes, (int)pf->args.values_count,
                     pf->ret_value.values, pf->ret_value.tcodes);
}

void TVMPackedFunc_SetArgs(TVMPackedFunc* pf, const TVMArgs* args) {
  memcpy(&pf->args, args, sizeof(TVMArgs));
}

/* Common part of the two Init functions: copy the name, refusing one that does not fit. */
static int InitName(TVMPackedFunc* pf, const char* name, const TVMArgs* args) {
  size_t len = strlen(name);
  if (len >= sizeof(pf->name)) {
    return TVMCrtError(kTvmErrorBufferTooSmall,
                       "function name '%.40s...' has %lu characters; the limit is %d "
                       "(raise TVM_CRT_MAX_STRLEN_FUNCTION_NAME in crt_config.h)",
                       name, (unsigned long)len, TVM_CRT_MAX_STRLEN_FUNCTION_NAME - 1);
  }
  memcpy(pf->name, name, len + 1);
  pf->Call = &TVMPackedFunc_Call;
  pf->SetArgs = &TVMPackedFunc_SetArgs;
  memset(&pf->ret_value, 0, sizeof(pf->ret_value));
  TVMPackedFunc_SetArgs(pf, args);
  return 0;
}

int TVMPackedFunc_InitGlobalFunc(TVMPackedFunc* pf, const char* name, const TVMArgs* args) {
  int status = InitName(pf, name, args);
  if (status != 0) return status;
  return TVMFuncGetGlobal(name, &pf->fexec);
}

int TVMPackedFunc_InitModuleFunc(TVMPackedFunc* pf, TVMModuleHandle module, const char* name,
                                 const TVMArgs* args) {
  int status = InitName(pf, name, args);
  if (status != 0) return status;
  return TVMModGetFunction(module, name, 0, &pf->fexec);
}
