/* The kernarg layouts of my-kernels.so, shared by the code object and the
 * programs that dispatch its kernels. */
#ifndef MY_KERNELS_H_
#define MY_KERNELS_H_

typedef struct my_fill_args { float *x; float start, step; } my_fill_args_t;    /* x[i] = start + step * i */
typedef struct my_saxpy_args { const float *x; float *y; float a; } my_saxpy_args_t; /* y = a x + y */
typedef struct my_scale_args { float *x; float s; } my_scale_args_t;            /* x *= s */

#endif
