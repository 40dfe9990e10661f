/* The programs each rank runs under mpirun (tests/comm/ranks.c): the
 * test binary started with AQ_TEST_RANK=NAME in its environment runs
 * program NAME before Criterion's main (a constructor), and exits with its
 * code. Each prints "rank R: NAME ok" on success, or "rank R: NAME FAILED:
 * why". */
#ifndef AQ_TESTS_COMM_RANKS_H_
#define AQ_TESTS_COMM_RANKS_H_

int rank_main(const char *name);

#endif
