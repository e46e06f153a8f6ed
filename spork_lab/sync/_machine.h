/* The interface between the compiled abstract machine (_machine.c) and the C
 * code _emit.py generates for one proc. The generated code owns the static
 * tables (thread masks, queues, buffer slots) and drives the machine with one
 * call per access, sync statement, allocation and scope end. */
#ifndef SPORK_SYNC_MACHINE_H
#define SPORK_SYNC_MACHINE_H

#include <stdint.h>

typedef struct Machine Machine;

/* Status of a run: anything but SC_OK stops the generated code. */
enum { SC_OK = 0, SC_UNSUPPORTED = 1, SC_ERROR = 2, SC_FULL = 3 };

/* Static parameters of one queue barrier (a barrier position, forward or reverse). */
typedef struct {
    int32_t lag;        /* mbarriers: ~N of the awaits; -1 otherwise */
    int32_t depth;      /* mbarriers: ring depth (0: no slots); 0 otherwise */
    int32_t max_wait_n; /* commit groups and events: the largest N of the awaits */
    int32_t scope;      /* commit groups: threads sharing one hardware queue; 0: not scoped */
    int32_t mbarrier;   /* every arrive (await) must be by the same threads */
} QueueParams;

/* Static parameters of one buffer slot (an argument or an Alloc statement). */
typedef struct {
    int32_t name;    /* buffer name id (hazards are reported once per kind, name, statement) */
    int32_t is_arg;  /* cleared at device-function boundaries */
    int32_t shared;  /* freed memory is reused by other threads (not registers) */
} SlotParams;

Machine *sc_new(int nw, int nmasks, const uint64_t *masks, const int32_t *po_mask,
                int nslots, const SlotParams *slots, int nqueues, const QueueParams *queues,
                int max_hazards, int max_events);
void sc_delete(Machine *M);
const int *sc_status(Machine *M);

void sc_buffer(Machine *M, int slot, int64_t n, int owner_mask, int dev);
void sc_release(Machine *M, int slot, int stmt);
void sc_access(Machine *M, int slot, int64_t e, int mask, int pair, int stmt, int write, int unordered);
void sc_fence(Machine *M, int mask, uint32_t m1, uint32_t m2a, uint32_t m2s);
void sc_arrive(Machine *M, int q, int mask, uint32_t m1, int stmt, int site, const int64_t *iv, int niv);
void sc_await(Machine *M, int q, int mask, uint32_t m2a, uint32_t m2s, int64_t N, int stmt, int site,
              const int64_t *iv, int niv);
void sc_end_barrier(Machine *M, int q0, int nq, int stmt);
void sc_task_begin(Machine *M);
void sc_task_end(Machine *M);
void sc_device_boundary(Machine *M);
void sc_fail(Machine *M, int status);

#endif
