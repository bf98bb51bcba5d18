/* dist.h - data-parallel training for the mixprec command: `mpirun -np N
 * mixprec train|compare ...` over OpenMPI (built in when CMake finds MPI:
 * MP_HAVE_MPI). The library knows nothing of MPI: it gets the reductions
 * through train.h's mp_train_dist, which this file implements.
 *
 * A process that OpenMPI's mpirun did not start (no OMPI_COMM_WORLD_SIZE or
 * PMIX_RANK in its environment) is rank 0 of 1 and initialises no MPI: it
 * runs as a build without MPI does. Under mpirun with N > 1 ranks, rank 0
 * alone writes files and prints; the other ranks' stdout goes to /dev/null
 * and they print only their own failures, as "rank R: ...". */
#ifndef MIXPREC_TOOLS_DIST_H
#define MIXPREC_TOOLS_DIST_H

#include <stdio.h>

#include "mixprec/mixprec.h"

/* Called first by main: under mpirun, MPI_Init, then (N > 1) the quiet
 * output above, one thread per core of the machine's ranks unless
 * MIXPREC_THREADS says otherwise, and a comparison of every rank's command
 * line (a difference stops every rank with one message from rank 0). 0, or
 * the exit status after a message (then every rank returns it). */
int dist_init(int argc, char **argv);

/* MPI_Finalize when dist_init initialised MPI; returns rc. */
int dist_finalize(int rc);

int dist_rank(void); /* 0 without mpirun */
int dist_size(void); /* 1 without mpirun */

/* "MPI: Open MPI v4.1.4" (the library's own words up to the first comma),
 * followed by ", rank R of N" once MPI is initialised (under mpirun only), or
 * "MPI: not built in", into buf. */
const char *dist_describe(char *buf, size_t cap);

/* The reductions for the trainer (train.h), or NULL with one rank. */
const mp_train_dist *dist_hook(void);

/* This process's ranks for mp_run (run.h): the functions below, and
 * dist_fault_step after each step. */
const mp_run_ranks *dist_ranks(void);

/* The gradients' format on the wire (--allreduce; MP_F32 until set): MP_F32
 * travels as MPI_FLOAT with MPI_SUM; MP_BF16 and MP_F16 as 16-bit codes
 * (wire.h) with a user-defined MPI_Op that widens both operands, adds in
 * fp32 and rounds once per combine. Also zeroes the statistics below. */
void dist_set_allreduce(mp_dtype wire);

/* What the trainer's reductions did since dist_set_allreduce, on this rank
 * (all zero with one rank): run.h's mp_allreduce_stats. */
typedef mp_allreduce_stats dist_stats;
const dist_stats *dist_get_stats(void);

/* Collective: 1 on every rank when flag is nonzero on any (with one rank:
 * whether flag is nonzero). */
int dist_any(int flag);

/* Collective: every rank's rc; returns the rc of the lowest rank whose rc is
 * nonzero (0 when none), that rank in *first. */
int dist_agree(int rc, int *first);

/* A failure of this rank alone, during training: the others wait in a
 * reduction, so the job ends here (MPI_Abort) after stdio is flushed. With
 * one rank: returns. */
void dist_abort(int rc);

/* Fault injection for the tests (tests/test_mpi.sh), as MIXPREC_FAULT_WRITE_*
 * (io.c), only in build/mixprec-fault (MP_FAULT_HOOKS): MIXPREC_FAULT_DIST_DIVERGE=R:S makes rank R change one weight
 * after step S (the next comparison of the ranks' state finds it). Called after each step. */
void dist_fault_step(long step, mp_optim *opt);

/* MIXPREC_FAULT_DIST_READ=R: 1 on rank R, whose data then cannot be read. */
int dist_fault_read(void);

#endif
