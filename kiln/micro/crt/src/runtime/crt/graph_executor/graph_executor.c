/*
 * graph_executor.c - the C graph executor: load the graph JSON, check every cross reference,
 * plan storage (or take linked params), bind kernels, run, and load params blobs.
 *
 * Nothing here trusts the JSON: every id and count is checked before it is used as an index,
 * so a corrupt graph is an error code with a message (fuzzed under ASan + UBSan).
 */
#include <string.h>
#include <tvm/runtime/crt/internal/common/crt_error.h>
#include <tvm/runtime/crt/internal/graph_executor/graph_executor.h>
#include <tvm/runtime/crt/platform.h>

#define BAD_GRAPH kTvmErrorFunctionCallInvalidArg

static const DLDevice kCPU = {kDLCPU, 0};

/* Zeroed memory for count elements of elem_size bytes; checks the product for overflow. */
static int AllocArray(void** out, size_t count, size_t elem_size, const char* what) {
  tvm_crt_error_t err;
  *out = NULL;
  if (count == 0) return 0;
  if (count > ((size_t)-1) / elem_size) {
    return TVMCrtError(kTvmErrorPlatformNoMemory, "graph executor: %s is too large", what);
  }
  err = TVMPlatformMemoryAllocate(count * elem_size, kCPU, out);
  if (err != kTvmErrorNoError) {
    *out = NULL;
    return TVMCrtError(err, "graph executor: out of memory for %s (%lu bytes)", what,
                       (unsigned long)(count * elem_size));
  }
  memset(*out, 0, count * elem_size);
  return 0;
}

static void FreeArray(void* ptr) {
  if (ptr != NULL) TVMPlatformMemoryFree(ptr, kCPU);
}

/* Parse a decimal string attribute ("1") as JSON graphs store them. */
static int ParseUIntAttr(const char* text, uint32_t* out, const char* what) {
  uint64_t value = 0;
  const char* c = text;
  if (*c == '\0') goto bad;
  for (; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') goto bad;
    value = value * 10 + (uint64_t)(*c - '0');
    if (value > 0xffffu) goto bad; /* no op has more than 65535 inputs or outputs */
  }
  *out = (uint32_t)value;
  return 0;
bad:
  return TVMCrtError(BAD_GRAPH, "graph JSON: attribute %s = \"%s\" is not a small integer",
                     what, text);
}

/* ---- loading ---- */

/* [node_id, index] or [node_id, index, version] */
static int LoadNodeEntry(JSONReader* reader, TVMGraphExecutorNodeEntry* entry) {
  uint32_t values[3] = {0, 0, 0};
  uint32_t n = 0;
  int has_item, first, status = JSONReader_BeginArray(reader, "node entry");
  for (first = 1; status == 0; first = 0) {
    status = JSONReader_NextArrayItem(reader, first, &has_item);
    if (status != 0 || !has_item) break;
    if (n == 3) return TVMCrtError(BAD_GRAPH, "graph JSON: a node entry has more than 3 numbers");
    status = JSONReader_ReadUInt32(reader, &values[n++], "a node entry number");
  }
  if (status != 0) return status;
  if (n < 2) return TVMCrtError(BAD_GRAPH, "graph JSON: a node entry has fewer than 2 numbers");
  entry->node_id = values[0];
  entry->index = values[1];
  entry->version = values[2];
  return 0;
}

/* Reads one array element into `item`. */
typedef int (*ReadItem)(JSONReader* reader, void* item, const char* what);

/*
 * A JSON array into a new array of elem_size-byte items, read by `read`. *count covers every
 * item started, including one that failed, so Release can free what it holds.
 */
static int LoadArray(JSONReader* reader, void** out, size_t elem_size, uint32_t* count,
                     ReadItem read, const char* what) {
  uint32_t n, i = 0;
  int has_item, status = JSONReader_ArrayLength(reader, &n);
  if (status == 0) status = AllocArray(out, n, elem_size, what);
  if (status == 0) status = JSONReader_BeginArray(reader, what);
  while (status == 0) {
    status = JSONReader_NextArrayItem(reader, i == 0, &has_item);
    if (status != 0 || !has_item) break;
    *count = ++i;
    status = read(reader, (char*)*out + (size_t)(i - 1) * elem_size, what);
  }
  *count = i;
  return status;
}

static int ReadNodeEntryItem(JSONReader* reader, void* item, const char* what) {
  (void)what;
  return LoadNodeEntry(reader, (TVMGraphExecutorNodeEntry*)item);
}

static int ReadUInt32Item(JSONReader* reader, void* item, const char* what) {
  return JSONReader_ReadUInt32(reader, (uint32_t*)item, what);
}

static int LoadNodeEntries(JSONReader* reader, TVMGraphExecutorNodeEntry** out, uint32_t* count,
                           const char* what) {
  return LoadArray(reader, (void**)out, sizeof(**out), count, &ReadNodeEntryItem, what);
}

static int LoadUInt32Array(JSONReader* reader, uint32_t** out, uint32_t* count, const char* what) {
  return LoadArray(reader, (void**)out, sizeof(**out), count, &ReadUInt32Item, what);
}

static int LoadNodeAttrs(JSONReader* reader, TVMGraphExecutorNode* node) {
  char key[32], value[16];
  int has_item, first, status = JSONReader_BeginObject(reader, "node attrs");
  for (first = 1; status == 0; first = 0) {
    status = JSONReader_NextObjectItem(reader, first, key, sizeof(key), &has_item);
    if (status != 0 || !has_item) break;
    if (strcmp(key, "func_name") == 0) {
      status = JSONReader_ReadString(reader, node->param.func_name,
                                     sizeof(node->param.func_name), "func_name",
                                     "TVM_CRT_MAX_STRLEN_FUNCTION_NAME");
    } else if (strcmp(key, "num_inputs") == 0 || strcmp(key, "num_outputs") == 0 ||
               strcmp(key, "flatten_data") == 0) {
      uint32_t* dest = key[4] == 'i' ? &node->param.num_inputs
                       : key[4] == 'o' ? &node->param.num_outputs
                                       : &node->param.flatten_data;
      status = JSONReader_ReadString(reader, value, sizeof(value), key, "(none)");
      if (status == 0) status = ParseUIntAttr(value, dest, key);
    } else {
      status = JSONReader_SkipValue(reader); /* hash, layouts, ... */
    }
  }
  return status;
}

static int LoadNode(JSONReader* reader, TVMGraphExecutorNode* node) {
  char key[16];
  int has_item, first, status = JSONReader_BeginObject(reader, "node");
  node->param.num_outputs = 1;
  for (first = 1; status == 0; first = 0) {
    status = JSONReader_NextObjectItem(reader, first, key, sizeof(key), &has_item);
    if (status != 0 || !has_item) break;
    if (strcmp(key, "op") == 0) {
      status = JSONReader_ReadString(reader, node->op_type, sizeof(node->op_type), "node op",
                                     "(none: it is \"null\" or \"tvm_op\")");
    } else if (strcmp(key, "name") == 0) {
      status = JSONReader_ReadString(reader, node->name, sizeof(node->name), "node name",
                                     "TVM_CRT_MAX_STRLEN_FUNCTION_NAME");
    } else if (strcmp(key, "inputs") == 0) {
      if (node->inputs != NULL) return TVMCrtError(BAD_GRAPH, "graph JSON: node has 2 inputs");
      status = LoadNodeEntries(reader, &node->inputs, &node->inputs_count, "node inputs");
    } else if (strcmp(key, "attrs") == 0) {
      status = LoadNodeAttrs(reader, node);
    } else {
      status = JSONReader_SkipValue(reader); /* control_deps, ... */
    }
  }
  return status;
}

static int ReadNodeItem(JSONReader* reader, void* item, const char* what) {
  (void)what;
  return LoadNode(reader, (TVMGraphExecutorNode*)item);
}

static int LoadNodes(JSONReader* reader, TVMGraphExecutor* executor) {
  return LoadArray(reader, (void**)&executor->nodes, sizeof(TVMGraphExecutorNode),
                   &executor->nodes_count, &ReadNodeItem, "nodes");
}

/* ["<type>", value]: check the type tag, leave the cursor on the value. */
static int BeginTypedAttr(JSONReader* reader, const char* type, const char* what) {
  char tag[16];
  int has_item;
  int status = JSONReader_BeginArray(reader, what);
  if (status == 0) status = JSONReader_NextArrayItem(reader, 1, &has_item);
  if (status == 0 && !has_item) status = TVMCrtError(BAD_GRAPH, "graph JSON: %s is empty", what);
  if (status == 0) status = JSONReader_ReadString(reader, tag, sizeof(tag), "attr type", "(none)");
  if (status == 0 && strcmp(tag, type) != 0) {
    status = TVMCrtError(BAD_GRAPH, "graph JSON: %s has type \"%s\", expected \"%s\"", what, tag,
                         type);
  }
  if (status == 0) status = JSONReader_NextArrayItem(reader, 0, &has_item);
  if (status == 0 && !has_item) {
    status = TVMCrtError(BAD_GRAPH, "graph JSON: %s has no value", what);
  }
  return status;
}

static int EndTypedAttr(JSONReader* reader) { return JSONReader_Expect(reader, ']', "']'"); }

static int LoadDLTypes(JSONReader* reader, TVMGraphExecutorGraphAttr* attrs) {
  char text[TVM_CRT_MAX_STRLEN_DLTYPE];
  uint32_t n, i = 0;
  int has_item, status = BeginTypedAttr(reader, "list_str", "attrs.dltype");
  if (status == 0) status = JSONReader_ArrayLength(reader, &n);
  if (status == 0) status = AllocArray((void**)&attrs->dltype, n, sizeof(DLDataType), "dltype");
  if (status == 0) status = JSONReader_BeginArray(reader, "dltype list");
  while (status == 0) {
    status = JSONReader_NextArrayItem(reader, i == 0, &has_item);
    if (status != 0 || !has_item) break;
    status = JSONReader_ReadString(reader, text, sizeof(text), "dltype",
                                   "TVM_CRT_MAX_STRLEN_DLTYPE");
    if (status == 0) status = TVMParseDLDataType(text, &attrs->dltype[i++]);
  }
  attrs->dltype_count = i;
  return status == 0 ? EndTypedAttr(reader) : status;
}

static int LoadShapes(JSONReader* reader, TVMGraphExecutorGraphAttr* attrs) {
  uint32_t n, i = 0;
  int has_item, status = BeginTypedAttr(reader, "list_shape", "attrs.shape");
  if (status == 0) status = JSONReader_ArrayLength(reader, &n);
  if (status == 0) status = AllocArray((void**)&attrs->ndim, n, sizeof(uint32_t), "shape ranks");
  if (status == 0) {
    status = AllocArray((void**)&attrs->shape, n, sizeof(int64_t) * TVM_CRT_MAX_NDIM, "shapes");
  }
  if (status == 0) status = JSONReader_BeginArray(reader, "shape list");
  while (status == 0) {
    uint32_t rank = 0;
    status = JSONReader_NextArrayItem(reader, i == 0, &has_item);
    if (status != 0 || !has_item) break;
    status = JSONReader_BeginArray(reader, "shape");
    while (status == 0) {
      int64_t dim;
      status = JSONReader_NextArrayItem(reader, rank == 0, &has_item);
      if (status != 0 || !has_item) break;
      if (rank == TVM_CRT_MAX_NDIM) {
        return TVMCrtError(BAD_GRAPH, "graph JSON: shape %lu has more than %d dimensions (raise "
                           "TVM_CRT_MAX_NDIM in crt_config.h)", (unsigned long)i, TVM_CRT_MAX_NDIM);
      }
      status = JSONReader_ReadInteger(reader, &dim, "a dimension");
      if (status == 0 && dim < 0) {
        status = TVMCrtError(BAD_GRAPH, "graph JSON: shape %lu has negative dimension %ld",
                             (unsigned long)i, (long)dim);
      }
      attrs->shape[(size_t)i * TVM_CRT_MAX_NDIM + rank++] = dim;
    }
    attrs->ndim[i++] = rank;
  }
  attrs->shape_count = i;
  return status == 0 ? EndTypedAttr(reader) : status;
}

/* Index of `key` in `keys` (NULL-terminated), or -1. */
static int KeyIndex(const char* const* keys, const char* key) {
  int i;
  for (i = 0; keys[i] != NULL; ++i) {
    if (strcmp(keys[i], key) == 0) return i;
  }
  return -1;
}

/* ["list_int", [...]] into a new array. */
static int LoadIntAttr(JSONReader* reader, uint32_t** out, uint32_t* count, const char* what) {
  int status = BeginTypedAttr(reader, "list_int", what);
  if (status == 0) status = LoadUInt32Array(reader, out, count, what);
  return status == 0 ? EndTypedAttr(reader) : status;
}

static int LoadGraphAttrs(JSONReader* reader, TVMGraphExecutorGraphAttr* attrs) {
  static const char* const kKeys[] = {"dltype", "shape", "storage_id", "device_index", NULL};
  char key[16];
  unsigned seen = 0;
  int has_item, first, status = JSONReader_BeginObject(reader, "attrs");
  for (first = 1; status == 0; first = 0) {
    int k;
    status = JSONReader_NextObjectItem(reader, first, key, sizeof(key), &has_item);
    if (status != 0 || !has_item) break;
    k = KeyIndex(kKeys, key);
    if (k >= 0 && (seen & (1u << k)) != 0) {
      return TVMCrtError(BAD_GRAPH, "graph JSON: attrs.%s appears twice", key);
    }
    if (k >= 0) seen |= 1u << k;
    switch (k) {
      case 0:
        status = LoadDLTypes(reader, attrs);
        break;
      case 1:
        status = LoadShapes(reader, attrs);
        break;
      case 2:
        status = LoadIntAttr(reader, &attrs->storage_id, &attrs->storage_id_count,
                             "attrs.storage_id");
        break;
      case 3:
        status = LoadIntAttr(reader, &attrs->device_index, &attrs->device_index_count,
                             "attrs.device_index");
        break;
      default:
        status = JSONReader_SkipValue(reader);
    }
  }
  return status;
}

int TVMGraphExecutor_Load(TVMGraphExecutor* executor, JSONReader* reader) {
  static const char* const kKeys[] = {"nodes", "arg_nodes", "heads", "node_row_ptr", "attrs",
                                      NULL};
  char key[16];
  unsigned seen = 0;
  int has_item, first, status = JSONReader_BeginObject(reader, "graph");
  for (first = 1; status == 0; first = 0) {
    int k;
    status = JSONReader_NextObjectItem(reader, first, key, sizeof(key), &has_item);
    if (status != 0 || !has_item) break;
    k = KeyIndex(kKeys, key);
    if (k >= 0 && (seen & (1u << k)) != 0) {
      return TVMCrtError(BAD_GRAPH, "graph JSON: \"%s\" appears twice", key);
    }
    if (k >= 0) seen |= 1u << k;
    switch (k) {
      case 0:
        status = LoadNodes(reader, executor);
        break;
      case 1:
        status = LoadUInt32Array(reader, &executor->input_nodes, &executor->input_nodes_count,
                                 "arg_nodes");
        break;
      case 2:
        status = LoadNodeEntries(reader, &executor->outputs, &executor->outputs_count, "heads");
        break;
      case 3:
        status = LoadUInt32Array(reader, &executor->node_row_ptr, &executor->node_row_ptr_count,
                                 "node_row_ptr");
        break;
      case 4:
        status = LoadGraphAttrs(reader, &executor->attrs);
        break;
      default:
        status = JSONReader_SkipValue(reader); /* metadata, ... */
    }
  }
  if (status == 0 && JSONReader_PeekNextNonSpace(reader) != '\0') {
    status = JSONReader_Expect(reader, '\0', "the end of the graph JSON");
  }
  return status;
}

/* ---- validation ---- */

uint32_t TVMGraphExecutor_GetEntryId(TVMGraphExecutor* executor, uint32_t nid, uint32_t index) {
  return executor->node_row_ptr[nid] + index;
}

/* Outputs of node nid (node_row_ptr is validated first). */
static uint32_t NumNodeOutputs(const TVMGraphExecutor* executor, uint32_t nid) {
  return executor->node_row_ptr[nid + 1] - executor->node_row_ptr[nid];
}

static int CheckEntry(const TVMGraphExecutor* executor, const TVMGraphExecutorNodeEntry* e,
                      const char* where, uint32_t where_index) {
  if (e->node_id >= executor->nodes_count) {
    return TVMCrtError(BAD_GRAPH, "graph JSON: %s %lu refers to node %lu of %lu", where,
                       (unsigned long)where_index, (unsigned long)e->node_id,
                       (unsigned long)executor->nodes_count);
  }
  if (e->index >= NumNodeOutputs(executor, e->node_id)) {
    return TVMCrtError(BAD_GRAPH, "graph JSON: %s %lu uses output %lu of node %lu, which has %lu",
                       where, (unsigned long)where_index, (unsigned long)e->index,
                       (unsigned long)e->node_id,
                       (unsigned long)NumNodeOutputs(executor, e->node_id));
  }
  return 0;
}

static int Validate(TVMGraphExecutor* executor) {
  const TVMGraphExecutorGraphAttr* attrs = &executor->attrs;
  uint32_t nid, i, num_entries;
  if (executor->nodes_count == 0 || executor->node_row_ptr == NULL || attrs->shape == NULL ||
      attrs->dltype == NULL || attrs->storage_id == NULL || executor->input_nodes == NULL ||
      executor->outputs == NULL) {
    return TVMCrtError(BAD_GRAPH, "graph JSON lacks one of nodes, arg_nodes, heads, "
                       "node_row_ptr, attrs.shape, attrs.dltype, attrs.storage_id");
  }
  if (executor->node_row_ptr_count != executor->nodes_count + 1 || executor->node_row_ptr[0] != 0) {
    return TVMCrtError(BAD_GRAPH, "graph JSON: node_row_ptr has %lu items for %lu nodes",
                       (unsigned long)executor->node_row_ptr_count,
                       (unsigned long)executor->nodes_count);
  }
  for (nid = 0; nid < executor->nodes_count; ++nid) {
    const TVMGraphExecutorNode* node = &executor->nodes[nid];
    uint32_t outs;
    if (executor->node_row_ptr[nid + 1] < executor->node_row_ptr[nid]) {
      return TVMCrtError(BAD_GRAPH, "graph JSON: node_row_ptr decreases at node %lu",
                         (unsigned long)nid);
    }
    outs = NumNodeOutputs(executor, nid);
    if (strcmp(node->op_type, "null") == 0) {
      if (outs != 1 || node->inputs_count != 0) {
        return TVMCrtError(BAD_GRAPH, "graph JSON: input node %lu ('%s') must have 1 output and "
                           "no inputs", (unsigned long)nid, node->name);
      }
    } else if (strcmp(node->op_type, "tvm_op") == 0) {
      if (outs != node->param.num_outputs || node->inputs_count != node->param.num_inputs ||
          outs == 0) {
        return TVMCrtError(BAD_GRAPH, "graph JSON: node %lu ('%s') has %lu inputs and %lu outputs "
                           "but its attrs say %lu and %lu", (unsigned long)nid, node->name,
                           (unsigned long)node->inputs_count, (unsigned long)outs,
                           (unsigned long)node->param.num_inputs,
                           (unsigned long)node->param.num_outputs);
      }
      if ((uint64_t)node->inputs_count + outs > TVM_CRT_MAX_ARGS) {
        return TVMCrtError(BAD_GRAPH, "graph JSON: node %lu ('%s') takes %lu arguments; the limit "
                           "is %d (raise TVM_CRT_MAX_ARGS in crt_config.h)", (unsigned long)nid,
                           node->name, (unsigned long)(node->inputs_count + outs),
                           TVM_CRT_MAX_ARGS);
      }
      if (node->param.func_name[0] == '\0') {
        return TVMCrtError(BAD_GRAPH, "graph JSON: node %lu ('%s') has no func_name",
                           (unsigned long)nid, node->name);
      }
    } else {
      return TVMCrtError(BAD_GRAPH, "graph JSON: node %lu has op \"%s\"; expected \"null\" or "
                         "\"tvm_op\"", (unsigned long)nid, node->op_type);
    }
    for (i = 0; i < node->inputs_count; ++i) {
      int status = CheckEntry(executor, &node->inputs[i], "an input of node", nid);
      if (status != 0) return status;
    }
  }
  num_entries = executor->node_row_ptr[executor->nodes_count];
  if (attrs->shape_count != num_entries || attrs->dltype_count != num_entries ||
      attrs->storage_id_count != num_entries ||
      (attrs->device_index != NULL && attrs->device_index_count != num_entries)) {
    return TVMCrtError(BAD_GRAPH, "graph JSON: %lu entries but %lu shapes, %lu dltypes, %lu "
                       "storage ids", (unsigned long)num_entries, (unsigned long)attrs->shape_count,
                       (unsigned long)attrs->dltype_count, (unsigned long)attrs->storage_id_count);
  }
  for (i = 0; i < num_entries; ++i) {
    if (attrs->storage_id[i] >= num_entries) {
      return TVMCrtError(BAD_GRAPH, "graph JSON: entry %lu has storage id %lu; ids must be below "
                         "the entry count %lu", (unsigned long)i,
                         (unsigned long)attrs->storage_id[i], (unsigned long)num_entries);
    }
    if (attrs->dltype[i].lanes != 1) {
      return TVMCrtError(BAD_GRAPH, "graph JSON: entry %lu has a vector dtype", (unsigned long)i);
    }
  }
  for (i = 0; i < executor->input_nodes_count; ++i) {
    uint32_t in = executor->input_nodes[i];
    if (in >= executor->nodes_count || strcmp(executor->nodes[in].op_type, "null") != 0) {
      return TVMCrtError(BAD_GRAPH, "graph JSON: arg_nodes[%lu] = %lu is not an input node",
                         (unsigned long)i, (unsigned long)in);
    }
  }
  for (i = 0; i < executor->outputs_count; ++i) {
    int status = CheckEntry(executor, &executor->outputs[i], "head", i);
    if (status != 0) return status;
  }
  return 0;
}

/* ---- storage and kernels ---- */

static int SetupStorage(TVMGraphExecutor* executor) {
  TVMGraphExecutorGraphAttr* attrs = &executor->attrs;
  uint32_t num_entries = executor->node_row_ptr[executor->nodes_count];
  uint32_t eid, sid;
  TVMPackedFunc lookup_linked_param;
  TVMArgs lookup_args;
  int has_linked_params, status;
  memset(&lookup_args, 0, sizeof(lookup_args));
  lookup_args.values_count = 1;
  lookup_args.tcodes[0] = kTVMArgInt;
  has_linked_params = TVMPackedFunc_InitModuleFunc(&lookup_linked_param, executor->module_handle,
                                                   "_lookup_linked_param", &lookup_args) == 0;
  status = AllocArray((void**)&executor->data_entry, num_entries, sizeof(TVMNDArray),
                      "data entries");
  if (status == 0) {
    status = AllocArray((void**)&executor->storage_pool, num_entries,
                        sizeof(TVMGraphExecutorStorageEntry), "storage pool");
  }
  if (status != 0) return status;
  executor->data_entry_count = num_entries;
  executor->storage_pool_count = num_entries;
  /* Each storage slot is as large as the largest entry placed in it. */
  for (eid = 0; eid < num_entries; ++eid) {
    TVMNDArray* entry = &executor->data_entry[eid];
    int64_t nbytes;
    const int64_t* shape = attrs->shape + (size_t)eid * TVM_CRT_MAX_NDIM;
    status = TVMNDArray_Create((int32_t)attrs->ndim[eid], shape,
                               attrs->dltype[eid], executor->devices[0], entry);
    if (status != 0) return status;
    nbytes = TVMNDArray_DataSizeBytes(entry);
    if (nbytes < 0) {
      return TVMCrtError(BAD_GRAPH, "graph JSON: entry %lu is too large", (unsigned long)eid);
    }
    sid = attrs->storage_id[eid];
    executor->storage_pool[sid].used = 1;
    if ((uint64_t)nbytes > executor->storage_pool[sid].size_bytes) {
      executor->storage_pool[sid].size_bytes = (uint64_t)nbytes;
    }
  }
  for (sid = 0; sid < num_entries; ++sid) {
    TVMGraphExecutorStorageEntry* slot = &executor->storage_pool[sid];
    if (has_linked_params) {
      lookup_linked_param.args.values[0].v_int64 = sid;
      status = lookup_linked_param.Call(&lookup_linked_param);
      if (status != 0) return status;
      if (lookup_linked_param.ret_value.tcodes[0] == kTVMOpaqueHandle &&
          lookup_linked_param.ret_value.values[0].v_handle != NULL) {
        slot->data = lookup_linked_param.ret_value.values[0].v_handle;
        slot->is_linked_param = 1;
        continue;
      }
    }
    if (!slot->used) continue;
    /* Empty tensors still get a real address (memcpy and kernels may not see NULL). */
    if (slot->size_bytes == 0) slot->size_bytes = 1;
    if (slot->size_bytes > (uint64_t)(size_t)-1) {
      return TVMCrtError(kTvmErrorPlatformNoMemory, "graph storage %lu is too large",
                         (unsigned long)sid);
    }
    status = TVMPlatformMemoryAllocate((size_t)slot->size_bytes, executor->devices[0], &slot->data);
    if (status != 0) {
      slot->data = NULL;
      return TVMCrtError(status, "graph executor: out of memory for storage %lu (%lu bytes)",
                         (unsigned long)sid, (unsigned long)slot->size_bytes);
    }
  }
  for (eid = 0; eid < num_entries; ++eid) {
    executor->data_entry[eid].dl_tensor.data = executor->storage_pool[attrs->storage_id[eid]].data;
  }
  return 0;
}

/* A node that calls a kernel: a "tvm_op" other than the planner's "__nop" aliases (reshape). */
static int IsKernelCall(const TVMGraphExecutorNode* node) {
  return strcmp(node->op_type, "tvm_op") == 0 && strcmp(node->param.func_name, "__nop") != 0;
}

static int SetupOpExecs(TVMGraphExecutor* executor) {
  uint32_t nid, i, num_ops = 0, num_flat = 0, flat_used = 0;
  int status;
  for (nid = 0; nid < executor->nodes_count; ++nid) {
    const TVMGraphExecutorNode* node = &executor->nodes[nid];
    if (!IsKernelCall(node)) continue;
    ++num_ops;
    if (node->param.flatten_data) num_flat += node->inputs_count + node->param.num_outputs;
  }
  /* One bound call per kernel node only: inputs and aliases take no op memory. */
  status = AllocArray((void**)&executor->op_execs, num_ops, sizeof(TVMPackedFunc), "op list");
  if (status == 0) {
    status = AllocArray((void**)&executor->flat_args, num_flat, sizeof(TVMGraphExecutorFlatArg),
                        "flattened arguments");
  }
  if (status != 0) return status;
  executor->flat_args_count = num_flat;
  for (nid = 0; nid < executor->nodes_count; ++nid) {
    const TVMGraphExecutorNode* node = &executor->nodes[nid];
    TVMArgs args;
    uint32_t num_args = node->inputs_count + node->param.num_outputs;
    if (!IsKernelCall(node)) continue;
    memset(&args, 0, sizeof(args));
    for (i = 0; i < num_args; ++i) {
      uint32_t eid = i < node->inputs_count
                         ? TVMGraphExecutor_GetEntryId(executor, node->inputs[i].node_id,
                                                       node->inputs[i].index)
                         : TVMGraphExecutor_GetEntryId(executor, nid, i - node->inputs_count);
      DLTensor* tensor = &executor->data_entry[eid].dl_tensor;
      if (node->param.flatten_data) {
        TVMGraphExecutorFlatArg* flat = &executor->flat_args[flat_used++];
        int64_t elements = 1;
        int32_t d;
        for (d = 0; d < tensor->ndim; ++d) elements *= tensor->shape[d];
        status = TVMNDArray_CreateView(&executor->data_entry[eid], &elements, 1, tensor->dtype,
                                       &flat->view);
        if (status != 0) return status;
        flat->eid = eid;
        tensor = &flat->view.dl_tensor;
      }
      args.values[i].v_handle = tensor;
      args.tcodes[i] = kTVMDLTensorHandle;
    }
    args.values_count = num_args;
    status = TVMPackedFunc_InitModuleFunc(&executor->op_execs[executor->op_execs_count++],
                                          executor->module_handle, node->param.func_name, &args);
    if (status == kTvmErrorFunctionNameNotFound) {
      return TVMCrtError(status, "graph executor: node %lu ('%s') calls '%s', which the module "
                         "does not have", (unsigned long)nid, node->name, node->param.func_name);
    }
    if (status != 0) return status;
  }
  return 0;
}

/* ---- public API ---- */

int TVMGraphExecutor_Create(const char* sym_json, TVMModuleHandle module_handle,
                            const DLDevice* devices, TVMGraphExecutor** executor) {
  TVMGraphExecutor* ex = NULL;
  JSONReader reader;
  int status;
  *executor = NULL;
  if (sym_json == NULL || devices == NULL) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "TVMGraphExecutor_Create: NULL argument");
  }
  if (devices[0].device_type != kDLCPU) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMGraphExecutor_Create: only CPU devices are supported, got type %d",
                       (int)devices[0].device_type);
  }
  status = AllocArray((void**)&ex, 1, sizeof(TVMGraphExecutor), "executor");
  if (status != 0) return status;
  ex->module_handle = module_handle;
  ex->devices[0] = devices[0];
  ex->devices_count = 1;
  JSONReader_Create(sym_json, &reader);
  status = TVMGraphExecutor_Load(ex, &reader);
  JSONReader_Release(&reader);
  if (status == 0) status = Validate(ex);
  if (status == 0) status = SetupStorage(ex);
  if (status == 0) status = SetupOpExecs(ex);
  if (status != 0) {
    TVMGraphExecutor_Release(&ex);
    return status;
  }
  *executor = ex;
  return 0;
}

int TVMGraphExecutor_GetNumInputs(TVMGraphExecutor* executor) {
  return (int)executor->input_nodes_count;
}

int TVMGraphExecutor_GetNumOutputs(TVMGraphExecutor* executor) {
  return (int)executor->outputs_count;
}

int TVMGraphExecutor_GetInputIndex(TVMGraphExecutor* executor, const char* name) {
  uint32_t i;
  for (i = 0; i < executor->input_nodes_count; ++i) {
    if (strcmp(executor->nodes[executor->input_nodes[i]].name, name) == 0) return (int)i;
  }
  return -1;
}

/* Entry of input `name`, or an error naming it. */
static int InputEntry(TVMGraphExecutor* executor, const char* name, uint32_t* eid) {
  int index = TVMGraphExecutor_GetInputIndex(executor, name);
  if (index < 0) {
    return TVMCrtError(kTvmErrorExecutorModuleNoSuchInput, "Could not find '%s' in graph's inputs",
                       name);
  }
  *eid = TVMGraphExecutor_GetEntryId(executor, executor->input_nodes[index], 0);
  return 0;
}

/* Whether `t` has the entry's dtype and shape. */
static int SameLayout(const DLTensor* entry, const DLTensor* t) {
  int32_t d;
  if (t->ndim != entry->ndim || t->dtype.code != entry->dtype.code ||
      t->dtype.bits != entry->dtype.bits || t->dtype.lanes != entry->dtype.lanes) {
    return 0;
  }
  for (d = 0; d < t->ndim; ++d) {
    if (t->shape[d] != entry->shape[d]) return 0;
  }
  return 1;
}

int TVMGraphExecutor_SetInput(TVMGraphExecutor* executor, const char* name, DLTensor* data_in) {
  uint32_t eid = 0;
  DLTensor* entry;
  int status = InputEntry(executor, name, &eid);
  if (status != 0) return status;
  entry = &executor->data_entry[eid].dl_tensor;
  if (!SameLayout(entry, data_in) || data_in->strides != NULL) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "SetInput('%s'): the tensor's shape or dtype differs from the graph's "
                       "(rank %d vs %d)", name, (int)data_in->ndim, (int)entry->ndim);
  }
  entry->data = (uint8_t*)data_in->data + data_in->byte_offset;
  return 0;
}

int TVMGraphExecutor_LoadParams(TVMGraphExecutor* executor, const char* param_blob,
                                const uint32_t param_size) {
  TVMParamsReader reader;
  TVMNDArray arr;
  char name[TVM_CRT_MAX_STRLEN_PARAM_NAME];
  int status = TVMParamsReader_Init(&reader, param_blob, param_size);
  while (status == 0) {
    uint32_t eid = 0;
    DLTensor* entry;
    int got = TVMParamsReader_Next(&reader, name, sizeof(name), &arr);
    if (got == 0) break;
    if (got != 1) return got;
    status = InputEntry(executor, name, &eid);
    if (status == 0) {
      entry = &executor->data_entry[eid].dl_tensor;
      if (!SameLayout(entry, &arr.dl_tensor)) {
        status = TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                             "LoadParams: param '%s' has another shape or dtype than the graph's "
                             "input", name);
      } else if (executor->storage_pool[executor->attrs.storage_id[eid]].is_linked_param) {
        status = TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                             "LoadParams: param '%s' is linked into the module", name);
      } else {
        memcpy(entry->data, arr.dl_tensor.data, (size_t)TVMNDArray_DataSizeBytes(&arr));
      }
    }
    TVMNDArray_Release(&arr);
  }
  return status;
}

int TVMGraphExecutor_Run(TVMGraphExecutor* executor) {
  uint32_t i;
  /* Flattened views copy the data pointer, which SetInput may have changed. */
  for (i = 0; i < executor->flat_args_count; ++i) {
    TVMGraphExecutorFlatArg* flat = &executor->flat_args[i];
    flat->view.dl_tensor.data = executor->data_entry[flat->eid].dl_tensor.data;
  }
  for (i = 0; i < executor->op_execs_count; ++i) {
    TVMPackedFunc* pf = &executor->op_execs[i];
    int status = pf->Call(pf);
    if (status != 0) return status;
  }
  return 0;
}

int TVMGraphExecutor_GetOutput(TVMGraphExecutor* executor, const int32_t idx, DLTensor* out) {
  const TVMGraphExecutorNodeEntry* head;
  DLTensor* entry;
  if (idx < 0 || (uint32_t)idx >= executor->outputs_count) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "GetOutput: index %d is out of range (%lu outputs)", (int)idx,
                       (unsigned long)executor->outputs_count);
  }
  head = &executor->outputs[idx];
  entry = &executor->data_entry[TVMGraphExecutor_GetEntryId(executor, head->node_id,
                                                            head->index)].dl_tensor;
  if (out->dtype.code != entry->dtype.code || out->dtype.bits != entry->dtype.bits) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "GetOutput(%d): dtype differs", (int)idx);
  }
  return TVMDeviceCopyDataFromTo(entry, out, NULL);
}

int TVMGraphExecutor_Release(TVMGraphExecutor** pptr) {
  TVMGraphExecutor* executor = *pptr;
  uint32_t i;
  if (executor == NULL) return 0;
  for (i = 0; i < executor->nodes_count; ++i) FreeArray(executor->nodes[i].inputs);
  FreeArray(executor->nodes);
  FreeArray(executor->input_nodes);
  FreeArray(executor->node_row_ptr);
  FreeArray(executor->outputs);
  FreeArray(executor->attrs.dltype);
  FreeArray(executor->attrs.shape);
  FreeArray(executor->attrs.ndim);
  FreeArray(executor->attrs.storage_id);
  FreeArray(executor->attrs.device_index);
  if (executor->storage_pool != NULL) {
    for (i = 0; i < executor->storage_pool_count; ++i) {
      if (!executor->storage_pool[i].is_linked_param) FreeArray(executor->storage_pool[i].data);
    }
  }
  FreeArray(executor->storage_pool);
  FreeArray(executor->data_entry);
  FreeArray(executor->op_execs);
  FreeArray(executor->flat_args);
  FreeArray(executor);
  *pptr = NULL;
  return 0;
}
