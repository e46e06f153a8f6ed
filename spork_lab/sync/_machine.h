/* The interface between the compiled abstract machine (_machine.c) and the C code cprint.py prints
 * for one Program (sync/program.py). The generated code owns the static tables (thread masks, queue
 * rules, buffer slots, sites) and drives the machine with one call per op; accesses first try an
 * inline fast path (sc_access_fast below). The results are read back through ctypes (engine.py). */
#ifndef SPORK_SYNC_MACHINE_H
#define SPORK_SYNC_MACHINE_H

#include <stdint.h>

typedef struct Machine Machine;

/* An element of a buffer: its write record and its read set (ids; 0: none); `word` is both at once
 * (w in the low half), which is what the caches compare. */
typedef union {
    struct {
        uint32_t w, r;
    };
    uint64_t word;
} Elem;

static inline uint64_t sc_elem_word(const Elem *x) { return x->word; }

typedef struct {
    Elem *el;                  /* per element (NULL: no live buffer in this slot) */
    int64_t n, ordinal, task;
    int32_t owner, dev, ndim, pad;
    int64_t dims[8];
    int64_t shard_size;        /* distributed shared memory: elements per shard (0: not split) */
    int32_t *shard_owner;      /* per shard: the owners' mask (-1: a shard no statement uses) */
    uint8_t *accessed;         /* an allocation's elements accessed so far, a bit each (NULL: an argument) */
} Buf;

#define SC_TRANSITIONS 32

/* What one access op did to an element (in state -> out state), valid in its epoch. */
typedef struct {
    uint64_t in, out;
    uint32_t epoch;
    int32_t mask;
} Transition;

/* An access op of the program (program.Access): what does not change from one run of it to the next. */
typedef struct {
    int32_t slot, pair, mode, unordered, site; /* mode 1: read, 2: write, 3: update (read, then write) */
} AccessParams;

/* One access op: its caches (the last element state on which repeating it changes nothing, read by the
 * inline fast path below; its recent transitions, read by the machine) and its parameters. */
typedef struct {
    uint64_t wr;
    uint32_t epoch;     /* wr, tin and tout hold in this epoch, for this collective: */
    int32_t mask;
    uint64_t tin, tout; /* a read that moved an element from list tin.r to list tout.r (0: none) */
    AccessParams op;
    Transition t[SC_TRANSITIONS];
} AccessCache;

/* A read-set list node: a record and the rest of the set (see _machine.c, "read sets"). */
typedef struct {
    int32_t rec;
    uint32_t next;
    int32_t refs, pad;
    int64_t task;   /* the task of `rec`: a list holds the running task's readers first */
    uint64_t bloom; /* one bit per record of the list (see rec_bit): most "is it a member?" need no walk */
} Node;

/* The start of a Machine: what the generated code's fast path of an access reads. */
typedef struct {
    int status;
    uint32_t epoch;
    Buf *bufs;
    AccessCache *ac;
    Node *nodes;
} SC_State;

/* Status of a run: anything but SC_OK stops the generated code. */
enum { SC_OK = 0, SC_UNSUPPORTED = 1, SC_ERROR = 2, SC_FULL = 3 };

#define SC_MAXIV 16  /* loop values a report shows per site */
#define SC_MAXDIM 8  /* dimensions of a reported element index (Buf.dims) */

/* A queue's rule (analysis.barriers.QueueRule). */
typedef struct {
    int32_t lag;          /* pairing by lag: ~N of the awaits; -1: pairing by count */
    int32_t depth;        /* ring slots (0: none) */
    int32_t max_wait_n;   /* pairing by count: the largest N of the awaits */
    int32_t scope;        /* threads sharing one hardware queue; 0: the queue is the barrier's */
    int32_t same_threads; /* every arrive (await) must be by the same threads */
} QueueParams;

typedef struct {
    int32_t name;   /* buffer name id (hazards are reported once per kind, name, statement) */
    int32_t shared; /* freed memory is reused by other threads (not registers) */
    int32_t global_memory; /* its records are kept apart: a remote arrive leaves them out (program.Arrive) */
    int32_t undefined; /* an allocation: a read of an element nothing wrote is UNINIT (Buf.accessed) */
} SlotParams;

typedef struct {
    int32_t stmt; /* statement index (hazards are reported once per kind, name, statement) */
    int32_t niv;  /* loop values reported */
} SiteParams;

typedef struct {
    int nw;                   /* 64-bit words per thread set */
    int nmasks;
    const uint64_t *masks;    /* nmasks x nw */
    const int32_t *po;        /* per pair: V_S pairs of a new ordered access (0: asynchronous) */
    const int32_t *completion; /* per pair: the V_S pair on which a register access is complete (Free) */
    int nslots;
    const SlotParams *slots;
    int nqueues;
    const QueueParams *queues;
    int nsites;
    const SiteParams *sites;
    int naccess;
    const AccessParams *access;
} Tables;

/* Who did something: a site, a collective (mask of a task), the site's loop values. */
typedef struct {
    int32_t site, mask;
    int64_t task;
    int64_t iv[SC_MAXIV];
    int64_t seq; /* barrier events made before it */
} Acc;

typedef struct {
    int32_t kind, slot;
    int64_t ordinal, element;
    int32_t ndim, has_other;
    int64_t index[SC_MAXDIM];
    Acc acc, other;
    int32_t queue, nparams;
    int64_t params[5];
    int64_t events_before; /* barrier events made when the hazard was found */
} HazardRow;

typedef struct {
    int32_t queue, pad;
    int64_t index, slot, parity;
    Acc acc;
} EventRow;

typedef struct {
    int32_t code, queue; /* program.ERR_*; the queue of a thread error, else -1 */
    int32_t has_acc, pad;
    Acc acc;
} ErrorRow;

Machine *sc_new(const Tables *T, int max_hazards, int max_events, int nwatch, const int64_t *watch);
void sc_delete(Machine *M);
const int *sc_status(Machine *M);

void sc_alloc(Machine *M, int slot, int ndim, const int64_t *dims, int owner_mask, int device, int64_t shard_size,
              int nshards, const int32_t *shard_owners);
void sc_free(Machine *M, int slot, int site, const int64_t *iv);
void sc_access(Machine *M, int k, int64_t e, int mask, const int64_t *iv);

void sc_release_set(Machine *M, uint32_t v);

/* Whether access op number k is done with element e without the machine: its cache says the element is
 * in a state that running the access again by the threads of `mask` leaves unchanged, or in the state
 * its last read moved from one read-set list to another (then it moves this element the same way).
 * Else the machine does the access (sc_access). */
int sc_done_call(SC_State *S, int k, int slot, int64_t e, int mask);
#ifdef SC_CALL_DONE /* a Program built with -O0: call the runtime's -O2 copy (gcc compiles the Program
                       about twice as fast without 27-odd inlined copies of it, and it runs no slower) */
#define sc_done sc_done_call
#else
static inline __attribute__((always_inline)) int sc_done(SC_State *S, int k, int slot, int64_t e, int mask) {
    const Buf *b = &S->bufs[slot];
    AccessCache *c = &S->ac[k];
    if (!((uint64_t)e < (uint64_t)b->n && c->epoch == S->epoch && c->mask == mask)) return 0;
    Elem *x = &b->el[e];
    const uint64_t word = sc_elem_word(x);
    if (word == c->wr) return 1;
    if (word != c->tin || !word) return 0;
    const uint32_t from = (uint32_t)(c->tin >> 32), to = (uint32_t)(c->tout >> 32);
    S->nodes[to >> 1].refs++;
    x->r = to;
    c->wr = c->tout; /* reading it again changes nothing */
    if (--S->nodes[from >> 1].refs == 0) { /* the last element on that list: the machine frees it */
        S->nodes[from >> 1].refs = 1;
        sc_release_set((Machine *)S, from);
    }
    return 1;
}
#endif
/* Whether element e of an allocation (b->accessed set) was accessed since the allocation. */
static inline int sc_was_accessed(const Buf *b, int64_t e) { return b->accessed[e >> 3] >> (e & 7) & 1; }

/* Whether a private register access (program.Access.first_only) is its element's first since the allocation
 * (or out of bounds): only then does the machine make it. */
static inline int sc_first(const SC_State *S, int slot, int64_t e) {
    const Buf *b = &S->bufs[slot];
    return (uint64_t)e >= (uint64_t)b->n || !b->accessed || !sc_was_accessed(b, e);
}
void sc_fence(Machine *M, int mask, uint32_t m1, uint32_t m2a, uint32_t m2s, int barrier);
void sc_arrive(Machine *M, int64_t q, int mask, uint32_t m1, int site, const int64_t *iv, int64_t tx, int64_t own);
void sc_trail(Machine *M, int mask, int pair, int64_t own, int nq, const int64_t *qs, int64_t tx, int site,
              const int64_t *iv);
void sc_await(Machine *M, int64_t q, int mask, uint32_t m2a, uint32_t m2s, int64_t N, int site, const int64_t *iv);
void sc_end_barrier(Machine *M, int q0, int nq, int site, const int64_t *iv);
void sc_task_begin(Machine *M);
void sc_task_end(Machine *M);
void sc_device_boundary(Machine *M);
void sc_fail(Machine *M, int code, int site, const int64_t *iv);

/* Results. */
int sc_n_hazards(Machine *M);
const HazardRow *sc_hazards(Machine *M);
int sc_truncated(Machine *M);
int64_t sc_n_events(Machine *M);
int64_t sc_events_total(Machine *M);
const EventRow *sc_events(Machine *M);
const ErrorRow *sc_error(Machine *M);

#endif
