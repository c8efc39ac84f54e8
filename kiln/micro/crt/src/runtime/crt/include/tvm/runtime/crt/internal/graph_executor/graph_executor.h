/*
 * graph_executor.h - the C graph executor's state (internal to the kiln CRT).
 *
 * Arrays are sized exactly from the JSON and come from TVMPlatformMemoryAllocate; entry ids
 * (eid) index node outputs through node_row_ptr, storage ids (sid) index the storage pool.
 */
#ifndef TVM_RUNTIME_CRT_INTERNAL_GRAPH_EXECUTOR_GRAPH_EXECUTOR_H_
#define TVM_RUNTIME_CRT_INTERNAL_GRAPH_EXECUTOR_GRAPH_EXECUTOR_H_

#include <tvm/runtime/crt/graph_executor.h>
#include <tvm/runtime/crt/internal/common/ndarray.h>
#include <tvm/runtime/crt/internal/graph_executor/load_json.h>
#include <tvm/runtime/crt/module.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One input of a node: output `index` of node `node_id`. */
typedef struct TVMGraphExecutorNodeEntry {
  uint32_t node_id;
  uint32_t index;
  uint32_t version;
} TVMGraphExecutorNodeEntry;

/* A storage pool slot: its memory, and whether that memory is linked into the module. */
typedef struct TVMGraphExecutorStorageEntry {
  uint8_t is_linked_param;
  uint8_t used; /* some entry lives here */
  void* data;
  uint64_t size_bytes;
} TVMGraphExecutorStorageEntry;

/* A graph node: a "null" (input / parameter) or a "tvm_op" (a kernel call). */
typedef struct TVMGraphExecutorNode {
  char op_type[16];
  char name[TVM_CRT_MAX_STRLEN_FUNCTION_NAME];
  TVMOpParam param;
  TVMGraphExecutorNodeEntry* inputs;
  uint32_t inputs_count;
} TVMGraphExecutorNode;

/* The graph-level "attrs": one dtype, shape and storage id per entry. */
typedef struct TVMGraphExecutorGraphAttr {
  DLDataType* dltype;
  uint32_t dltype_count;
  int64_t* shape; /* TVM_CRT_MAX_NDIM slots per entry */
  uint32_t* ndim;
  uint32_t shape_count;
  uint32_t* storage_id;
  uint32_t storage_id_count;
  uint32_t* device_index;
  uint32_t device_index_count;
} TVMGraphExecutorGraphAttr;

/* A flattened argument view (flatten_data ops) and the entry it mirrors. */
typedef struct TVMGraphExecutorFlatArg {
  TVMNDArray view;
  uint32_t eid;
} TVMGraphExecutorFlatArg;

struct TVMGraphExecutor {
  TVMGraphExecutorNode* nodes;
  uint32_t nodes_count;
  uint32_t* input_nodes;
  uint32_t input_nodes_count;
  uint32_t* node_row_ptr;
  uint32_t node_row_ptr_count;
  TVMGraphExecutorNodeEntry* outputs;
  uint32_t outputs_count;
  TVMGraphExecutorGraphAttr attrs;
  TVMModuleHandle module_handle;
  DLDevice devices[1];
  uint32_t devices_count;
  TVMGraphExecutorStorageEntry* storage_pool;
  uint32_t storage_pool_count;
  TVMNDArray* data_entry; /* views into the storage pool, one per entry */
  uint32_t data_entry_count;
  TVMPackedFunc* op_execs; /* one per kernel call, in node order */
  uint32_t op_execs_count;
  TVMGraphExecutorFlatArg* flat_args;
  uint32_t flat_args_count;
};

/* Entry id of output `index` of node `nid`. */
uint32_t TVMGraphExecutor_GetEntryId(TVMGraphExecutor* executor, uint32_t nid, uint32_t index);

/* Parse the graph JSON into `executor` (no validation of cross references). */
int TVMGraphExecutor_Load(TVMGraphExecutor* executor, JSONReader* reader);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_INTERNAL_GRAPH_EXECUTOR_GRAPH_EXECUTOR_H_ */
