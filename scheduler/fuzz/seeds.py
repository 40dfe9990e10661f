#!/usr/bin/env python3
"""Writes the graph fuzzer's seeds (tests/graph-corpus/): small valid
programs in graph_fuzz.c's byte language, so that mutation starts from
graphs that instantiate and run. Run it again after changing the decoder."""
import os
import sys

TENSOR, INIT, UNARY, MATMUL, NN, TRAIN, KERNEL, HOST, EDGE, GROUP, INST, RUN, IO = 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13
F32, I32 = 0x18, 0x1A  # dtype and a plain name
INPUT, PARAM = 1, 2


def tensor(dtype, role, *dims):  # each dim byte d gives 1 + d (d < 8)
    return [TENSOR, dtype, role, len(dims)] + [d - 1 for d in dims]


def pick(index, count):  # the byte pick_tensor / pick_task turn into t[index]
    b = 10
    while b % count != index:
        b += 1
    return b


def inst_run(policy=1, flags=0):
    return [INST, policy, 1, flags, RUN, 1, 0, RUN, 1, 0]


def relu():
    return tensor(F32, INPUT, 4) + [UNARY, pick(0, 1), 0] + inst_run() + [IO, 10, pick(1, 2)]


def mlp(policy=1, flags=0):
    p = tensor(F32, INPUT, 4, 3) + tensor(I32, INPUT, 4) + tensor(F32, PARAM, 3, 5) + tensor(F32, PARAM, 5)
    p += [INIT, 4, 3, 3, 3, 3, 3, 1, 7, pick(2, 4), 0]
    p += [MATMUL, pick(0, 4), pick(2, 4), 1, pick(3, 4), 4]  # t4 = relu(x w1 + b1)
    p += tensor(F32, PARAM, 5, 2)  # t5
    p += [MATMUL, pick(4, 6), pick(5, 6), 0, 0]  # t6 logits
    p += [NN, 3, pick(6, 7), pick(1, 7)]  # t7 loss
    p += [TRAIN, 0, pick(7, 8)]
    p += [TRAIN, 1, pick(2, 8)]  # t8 = dw1
    p += [TRAIN, 2, 3, 10, 0, pick(2, 9), pick(8, 9), 1]
    return p + inst_run(policy, flags) + [IO, 10, pick(7, 9)]


def noop_kernel():  # a raw task on the test kernels' noop, reading and writing t0
    return [KERNEL, 0x08, 16, 0, 0, 0, 1, 1, pick(0, 1), 3, pick(0, 1), 3] + [0] * 10 + [0]


def raw():
    p = tensor(F32, INPUT, 4) + noop_kernel()
    p += [HOST, 1, 1, 0, pick(0, 1), pick(0, 1)]
    p += [EDGE, 1, pick(0, 2), pick(1, 2)]
    p += [GROUP, 1] + noop_kernel() + noop_kernel() + [GROUP, 6]
    return p + inst_run(2)


def conv():
    p = tensor(F32, INPUT, 2, 1, 6, 6) + tensor(F32, PARAM, 2, 1, 3, 3) + tensor(F32, PARAM, 2)
    p += [NN, 0, 1, 1, 1, 1, 1, 1, pick(0, 3), pick(1, 3), 1, pick(2, 3), 1]  # t3 conv
    p += [NN, 1, 2, 2, 0, 0, 0, 0, pick(3, 4), 1]  # t4 pool
    return p + inst_run(3)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../tests/graph-corpus")
    os.makedirs(out, exist_ok=True)
    seeds = {"relu": relu(), "mlp-eager": mlp(), "mlp-heft": mlp(5), "mlp-no-fusion-no-reuse": mlp(1, 9),
             "raw-noop": raw(), "conv-pool": conv()}
    for name, prog in seeds.items():
        with open(os.path.join(out, "seed-" + name), "wb") as f:
            f.write(bytes(prog))


main()
