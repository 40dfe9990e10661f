/* The kernarg of collectives-cpu.so's one kernel: a call into the runtime
 * with the addresses of a task's tensors, which only a kernel task's
 * kernarg receives (the exec writes them there, and again after
 * aq_exec_bind moves one). The collectives' start tasks are such kernels. */
#ifndef AQ_KERNELS_COMM_CALL_H_
#define AQ_KERNELS_COMM_CALL_H_

#define AQ_KERNEL_TENSOR_CALL "aq_tensor_call"
#define AQ_TENSOR_CALL_CODE_OBJECT "collectives-cpu.so"

enum { AQ_TENSOR_CALL_PTRS = 14 };

typedef struct aq_tensor_call_args {
  void (*fn)(void *user, void *const *ptrs);
  void *user;
  void *ptrs[AQ_TENSOR_CALL_PTRS]; /* the task's reads, then its writes */
} aq_tensor_call_args_t;

#endif
