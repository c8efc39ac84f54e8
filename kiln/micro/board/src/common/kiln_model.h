/* The model glue a standalone program links: generated per model by kiln.micro.board
 * (model_aot.c for the AOT executor's C interface, model_graph.c for the C graph executor).
 */
#ifndef KILN_MODEL_H_
#define KILN_MODEL_H_

#include <stddef.h>
#include <stdint.h>

extern const int kiln_num_inputs;
extern const int kiln_num_outputs;
extern void* kiln_input_data[];
extern const size_t kiln_input_bytes[];
extern void* kiln_output_data[];
extern const size_t kiln_output_bytes[];

/* Point kiln_input_data/kiln_output_data where the model wants its I/O (inside the AOT
 * workspace pool under tir.usmp.use_workspace_io); before the inputs are read. */
int kiln_model_prepare(void);
/* Create the executor and hand it the inputs; 0 on success. */
int kiln_model_init(void);
/* One inference (the only part that is timed); 0 on success. */
int kiln_model_run(void);
/* Copy the outputs into kiln_output_data; 0 on success. */
int kiln_model_finish(void);

#endif /* KILN_MODEL_H_ */
