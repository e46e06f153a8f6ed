/* The abstract machine of SYNC_MODEL.md, compiled: the state and the rules.
 *
 * cprint.py prints a Program (sync/program.py: the proc lowered once for both
 * engines) as C code that calls these functions op by op; sync_check runs it at
 * concrete sizes. The rules are those of reference.py (the Python reference
 * engine), and a run returns exactly what the reference returns for the same
 * Program (hazards, barrier events, errors); this file only makes them fast:
 *
 * - A thread set is a bitset over the threads of one task's top-level
 *   collective ("mask", nw 64-bit words); signature sets V_A and V_S are one
 *   bitset per (instr-tl, usage-tl) pair bit (NP of them). Every record
 *   belongs to one task: signatures of different tasks never match.
 * - Records (V_A, V_S, pending marks) are hash-consed and reference-counted.
 *   Elements hold a write record id and a read set (a hash-consed list of
 *   record ids). A sync changes each distinct live record of the running task
 *   once, in place; a record that becomes equal to another is forwarded to it.
 * - Hazards are recorded once per (kind, buffer name, statement), in order.
 *   A second run watches the elements of the first run's hazards, keeping
 *   their access history, to name the other access of each. Barrier events
 *   are logged up to a cap.
 * - Execution order is kept apart from the records: an await of a ring
 *   queue starts an Order (the threads ordered after it), which every sync
 *   grows whatever its sync-tls; the arrive reusing the awaited arrive's
 *   ring slot must be made by threads it holds (reference.py, _Order).
 */
#include "_machine.h"

#include <stdlib.h>
#include <string.h>

#define NP 10     /* (instr-tl, usage-tl) pairs: timelines.ALL_PAIRS */
#define MAXMARK 16 /* queues a record may be pending on at once (more: SC_UNSUPPORTED) */
#define NCACHE 65536 /* read-set nodes remembered for sharing */

enum { K_RAW, K_WAR, K_WAW, K_FREE, K_DEADLOCK, K_COUNT, K_TX, K_UNINIT };
enum { P_IN_ORDER = 1 }; /* timelines.pair_bit(cuda_in_order_instr) */

/* What elements point to: a record id. A canonical record has a value slot; a record merged into
 * another keeps only this (12 bytes), so the elements still naming it cost little. */
typedef struct {
    int32_t refs;         /* element writes, read-set nodes and forwards pointing here */
    int32_t fwd;          /* merged into this record (0: canonical) */
    int32_t slot;         /* its value (Rec and words), -1 once merged or freed */
} Ref;

/* The value of a canonical record. */
typedef struct {
    int32_t hnext;        /* hash chain */
    int32_t prev, next;   /* the running task's live list */
    uint8_t intable, live;
    uint8_t glob;         /* a record of global memory (kept apart: program.Arrive's `own`) */
    uint32_t stamp;       /* changes whenever the value changes or the id is reused */
    uint32_t hash;
    uint32_t vamask;      /* pair bits with a non-empty V_A (a quick reject for syncs) */
    uint32_t vsmask;      /* pair bits with a non-empty V_S */
    int64_t task;
    int32_t nmarks;
    int32_t mq[MAXMARK];  /* pending on queue mq[i] since arrive mn[i] (0: completed), sorted by queue */
    int64_t mn[MAXMARK];
} Rec;

typedef struct {
    int64_t narr, awaits, upto;
    int32_t arr_mask, await_mask; /* same_threads: the threads of the first arrive / await (-1: none yet), of every scope */
    Acc *arrives;                 /* who made each arrive of this scope (for DEADLOCK and COUNT reports) */
    int64_t *txe;                 /* per arrive: the TMA bytes its phase expects */
    int64_t caparr;
    int64_t *txd, captxd, ntxd;   /* TMA bytes delivered per phase (txd[n], n <= ntxd: the last phase reached) */
} Queue;

/* The threads ordered after one await of a ring queue by every thread that made it, and the queues whose awaits
   carry that order (reference.py, _Order: an await by several threads starts with none, its threads waiting). */
typedef struct {
    int32_t q;
    int32_t has_waiters;          /* waiters is not empty: reached_by tests this, not the nw words */
    int64_t k;                    /* the arrive it awaited */
    Acc acc;                      /* the await */
    uint64_t *threads;            /* nw words */
    uint64_t *waiters;            /* nw words: the await's threads, until a sync of them all (empty after) */
    int64_t *marks;               /* per queue: the earliest arrive carrying it (0: none) */
} Order;

/* An order kept for later tasks (keep_for_later_tasks) owns its thread sets; its marks are NULL. */
static void free_kept_order(Order *o) {
    free(o->threads);
    free(o->waiters);
}

/* The access history of a watched element (second run): the last write and the reads since. */
typedef struct {
    int64_t ordinal, element;
    int32_t wrec, nreads, capreads, pad;
    Acc write;
    int32_t *rrec;
    Acc *reads;
} History;

/* The last new-access record per (pair, mask): valid while its stamp and task match. */
typedef struct {
    int32_t rec;
    uint32_t stamp;
    int64_t task;
} Fresh;

struct Machine {
    SC_State st;                  /* first: what the generated code's fast path reads (_machine.h) */
    const Tables *T;
    int nw, rw;                   /* words per thread set; words per record */
    int nmasks;
    const uint64_t *masks;        /* nmasks x nw */
    int32_t po[NP];               /* V_S pairs of a new access per pair bit (0: asynchronous) */
    int32_t completion[NP];       /* per pair bit: the V_S pair on which a register access is complete */
    /* records; id 0 is the scratch record used to build a value before interning it */
    Ref *ref;                     /* per record id */
    int32_t nref, capref, *freeref, nfreeref;
    Rec *rh;                      /* per value slot */
    uint64_t *rb;                 /* per value slot: V_A[NP], V_S[NP], mark threads[MAXMARK], nw words each */
    int32_t nrec, caprec, *freerec, nfree;
    int32_t *rbuck;
    uint32_t nrbuck, nrtable;
    uint32_t clock;
    int32_t live_head;
    int64_t task, ntasks;
    Fresh *fresh;                 /* [unordered][pair][mask] */
    /* read-set nodes, hash-consed on (rec, next) */
    int32_t nnode, capnode, *freenode, nfreenode;
    int32_t ncache[NCACHE];       /* recent nodes by (record, rest): see "read sets" */
    /* buffers and queues */
    int nslots;
    const SlotParams *sp;
    int64_t ordinal;
    int nq;
    const QueueParams *qp;
    Queue *qs;
    Order *ord;                   /* awaits of ring queues whose slot no arrive reused yet; buffers kept past nord */
    int64_t nord, capord;
    Order *car;                   /* the orders every task so far left to a barrier's next scope (sc_task_end) */
    int64_t ncar, capcar;
    /* the second run: watched elements and their histories */
    int nwatch;
    History *hist;
    /* results */
    HazardRow *haz;
    int nh, maxh, truncated;
    int64_t *seen;                /* (kind, name, statement) already reported */
    int nseen, capseen;
    EventRow *ev;
    int64_t nev, maxev, evtotal;
    ErrorRow err;
    uint64_t *tmp;                /* nw scratch words */
    uint64_t *none;               /* nw zero words: no threads */
    int32_t *changed;             /* records changed by the running sync, out of the table until settled */
    int64_t nchanged, capchanged;
};

static void *grow(void *p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return p;
    int64_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    p = realloc(p, (size_t)c * elem);
    if (!p) abort();
    *cap = c;
    return p;
}

/* ---- thread sets ---- */

static inline const uint64_t *mask_bits(Machine *M, int m) { return M->masks + (int64_t)m * M->nw; }
static inline Rec *R(Machine *M, int32_t r) { return &M->rh[M->ref[r].slot]; }
static inline uint64_t *W(Machine *M, int32_t r) { return M->rb + (int64_t)M->ref[r].slot * M->rw; }
static inline uint64_t *VA(Machine *M, int32_t r, int p) { return W(M, r) + p * M->nw; }
static inline uint64_t *VS(Machine *M, int32_t r, int p) { return W(M, r) + (NP + p) * M->nw; }
static inline uint64_t *MT(Machine *M, int32_t r, int i) { return W(M, r) + (2 * NP + i) * M->nw; }

static inline int subset(const uint64_t *a, const uint64_t *b, int nw) {
    for (int i = 0; i < nw; i++)
        if (a[i] & ~b[i]) return 0;
    return 1;
}

static inline int intersects(const uint64_t *a, const uint64_t *b, int nw) {
    for (int i = 0; i < nw; i++)
        if (a[i] & b[i]) return 1;
    return 0;
}

static inline int is_empty(const uint64_t *a, int nw) {
    for (int i = 0; i < nw; i++)
        if (a[i]) return 0;
    return 1;
}

/* Does some pair of m1 in V_A hold a thread of tm? (the record synchronizes with m1 x tm) */
static int meets(Machine *M, int32_t r, const uint64_t *tm, uint32_t m1) {
    uint32_t bits = R(M, r)->vamask & m1;
    for (int p = 0; bits; p++, bits >>= 1)
        if ((bits & 1) && intersects(VA(M, r, p), tm, M->nw)) return 1;
    return 0;
}

/* Is every pair of `pairs` in V_S for every thread of tm? */
static int covers_all(Machine *M, int32_t r, const uint64_t *tm, uint32_t pairs) {
    for (int p = 0; pairs; p++, pairs >>= 1)
        if ((pairs & 1) && !subset(tm, VS(M, r, p), M->nw)) return 0;
    return 1;
}

/* ---- records: hashing, interning, reference counts ---- */

static inline uint64_t mix(uint64_t h, uint64_t w) {
    h ^= w;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint32_t rec_hash(Machine *M, int32_t r) {
    /* Only the pairs present (vamask, vsmask): equal values have equal masks. */
    Rec *x = R(M, r);
    uint64_t h = mix((uint64_t)x->task, x->vamask ^ ((uint64_t)x->vsmask << 16) ^ ((uint64_t)x->glob << 48));
    for (uint32_t bits = x->vamask, p = 0; bits; p++, bits >>= 1)
        if (bits & 1)
            for (int i = 0; i < M->nw; i++) h = mix(h, VA(M, r, p)[i]);
    for (uint32_t bits = x->vsmask, p = 0; bits; p++, bits >>= 1)
        if (bits & 1)
            for (int i = 0; i < M->nw; i++) h = mix(h, VS(M, r, p)[i]);
    for (int i = 0; i < x->nmarks; i++) {
        h = mix(h, (uint64_t)x->mq[i] << 40 ^ (uint64_t)x->mn[i]);
        const uint64_t *t = MT(M, r, i);
        for (int j = 0; j < M->nw; j++) h = mix(h, t[j]);
    }
    return (uint32_t)h;
}

static int rec_equal(Machine *M, int32_t a, int32_t b) {
    Rec *x = R(M, a), *y = R(M, b);
    if (x->hash != y->hash || x->task != y->task || x->nmarks != y->nmarks || x->vamask != y->vamask ||
        x->vsmask != y->vsmask || x->glob != y->glob)
        return 0;
    if (memcmp(VA(M, a, 0), VA(M, b, 0), sizeof(uint64_t) * 2 * NP * M->nw)) return 0;
    for (int i = 0; i < x->nmarks; i++)
        if (x->mq[i] != y->mq[i] || x->mn[i] != y->mn[i] || memcmp(MT(M, a, i), MT(M, b, i), sizeof(uint64_t) * M->nw))
            return 0;
    return 1;
}

static void rtable_insert(Machine *M, int32_t r);

static void rtable_grow(Machine *M) {
    uint32_t old = M->nrbuck;
    int32_t *ob = M->rbuck;
    M->nrbuck = old ? old * 2 : 1024;
    M->rbuck = calloc(M->nrbuck, sizeof(int32_t));
    M->nrtable = 0;
    for (uint32_t b = 0; b < old; b++)
        for (int32_t r = ob[b], nx; r; r = nx) {
            nx = R(M, r)->hnext;
            rtable_insert(M, r);
        }
    free(ob);
}

static void rtable_insert(Machine *M, int32_t r) {
    if (M->nrtable >= M->nrbuck) rtable_grow(M);
    uint32_t b = R(M, r)->hash & (M->nrbuck - 1);
    R(M, r)->hnext = M->rbuck[b];
    M->rbuck[b] = r;
    R(M, r)->intable = 1;
    M->nrtable++;
}

static void rtable_remove(Machine *M, int32_t r) {
    if (!R(M, r)->intable) return;
    int32_t *p = &M->rbuck[R(M, r)->hash & (M->nrbuck - 1)];
    while (*p != r) p = &R(M, *p)->hnext;
    *p = R(M, r)->hnext;
    R(M, r)->intable = 0;
    M->nrtable--;
}

static int32_t rtable_find(Machine *M, int32_t r) {
    if (!M->nrbuck) return 0;
    for (int32_t o = M->rbuck[R(M, r)->hash & (M->nrbuck - 1)]; o; o = R(M, o)->hnext)
        if (o != r && rec_equal(M, o, r)) return o;
    return 0;
}

static void live_unlink(Machine *M, int32_t r) {
    Rec *x = R(M, r);
    if (!x->live) return;
    if (x->prev) R(M, x->prev)->next = x->next; else M->live_head = x->next;
    if (x->next) R(M, x->next)->prev = x->prev;
    x->live = 0;
}

static void live_push(Machine *M, int32_t r) {
    Rec *x = R(M, r);
    x->prev = 0;
    x->next = M->live_head;
    if (M->live_head) R(M, M->live_head)->prev = r;
    M->live_head = r;
    x->live = 1;
}

static inline void rec_incref(Machine *M, int32_t r) { M->ref[r].refs++; }

static inline void new_epoch(Machine *M);

/* Give a value slot back. */
static void slot_release(Machine *M, int32_t r) {
    new_epoch(M);
    R(M, r)->stamp = ++M->clock;
    M->freerec[M->nfree++] = M->ref[r].slot;
    M->ref[r].slot = -1;
}

static void rec_decref(Machine *M, int32_t r) {
    while (r && --M->ref[r].refs == 0) {
        int32_t f = M->ref[r].fwd;
        if (M->ref[r].slot >= 0) {
            rtable_remove(M, r);
            live_unlink(M, r);
            slot_release(M, r);
        }
        M->freeref[M->nfreeref++] = r;
        new_epoch(M);
        r = f;
    }
}

static inline int32_t rec_find(Machine *M, int32_t r) {
    while (M->ref[r].fwd) r = M->ref[r].fwd;
    return r;
}

/* A new record id with a value slot (contents undefined). */
static int32_t rec_alloc(Machine *M) {
    int32_t r, slot;
    if (M->nfreeref) {
        r = M->freeref[--M->nfreeref];
    } else {
        if (M->nref == M->capref) {
            M->capref = M->capref ? M->capref * 2 : 256;
            M->ref = realloc(M->ref, sizeof(Ref) * M->capref);
            M->freeref = realloc(M->freeref, sizeof(int32_t) * M->capref);
            if (!M->ref || !M->freeref) abort();
        }
        r = M->nref++;
    }
    if (M->nfree) {
        slot = M->freerec[--M->nfree];
    } else {
        if (M->nrec == M->caprec) {
            M->caprec = M->caprec ? M->caprec * 2 : 256;
            M->rh = realloc(M->rh, sizeof(Rec) * M->caprec);
            M->rb = realloc(M->rb, sizeof(uint64_t) * M->rw * (int64_t)M->caprec);
            M->freerec = realloc(M->freerec, sizeof(int32_t) * M->caprec);
            if (!M->rh || !M->rb || !M->freerec) abort();
        }
        slot = M->nrec++;
    }
    M->ref[r] = (Ref){0, 0, slot};
    return r;
}

/* The interned record of a new access by threads `mask` on pair p with V_S pairs `po` to memory of kind
   `glob`, or 0 if there is none (the scratch record 0 holds its value). */
static int32_t find_fresh(Machine *M, int mask, int p, int32_t po, int glob) {
    const uint64_t *tm = mask_bits(M, mask);
    memset(VA(M, 0, 0), 0, sizeof(uint64_t) * M->rw);
    memcpy(VA(M, 0, p), tm, sizeof(uint64_t) * M->nw);
    for (int q = 0; q < NP; q++)
        if (po >> q & 1) memcpy(VS(M, 0, q), tm, sizeof(uint64_t) * M->nw);
    Rec *s = R(M, 0);
    s->task = M->task;
    s->glob = (uint8_t)glob;
    s->nmarks = 0;
    s->vamask = 1u << p;
    s->vsmask = (uint32_t)po;
    s->hash = rec_hash(M, 0);
    return rtable_find(M, 0);
}

/* The record of a new access by threads `mask` on pair p to memory of kind `glob` (interned; refs not taken).
   `unordered`: visible to no thread yet (V_S empty), as sync/access.py explains. */
static int32_t fresh_record(Machine *M, int mask, int p, int unordered, int glob) {
    Fresh *c = &M->fresh[((int64_t)(2 * glob + unordered) * NP + p) * M->nmasks + mask];
    const int32_t po = unordered ? 0 : M->po[p];
    if (c->rec && c->task == M->task && M->ref[c->rec].slot >= 0 && R(M, c->rec)->stamp == c->stamp) return c->rec;
    int32_t r = find_fresh(M, mask, p, po, glob);
    if (!r) {
        r = rec_alloc(M);
        memcpy(VA(M, r, 0), VA(M, 0, 0), sizeof(uint64_t) * M->rw);
        Rec *x = R(M, r);
        memset(x, 0, sizeof(Rec));
        x->task = M->task;
        x->glob = (uint8_t)glob;
        x->hash = R(M, 0)->hash;
        x->vamask = 1u << p;
        x->vsmask = (uint32_t)po;
        x->stamp = ++M->clock;
        rtable_insert(M, r);
        live_push(M, r);
    }
    c->rec = r;
    c->stamp = R(M, r)->stamp;
    c->task = M->task;
    return r;
}

/* Before changing record r in place, as part of the running sync: it leaves the table until `settle`. */
static void begin_update(Machine *M, int32_t r) {
    if (!R(M, r)->intable) return; /* already changed by this sync */
    rtable_remove(M, r);
    M->changed = grow(M->changed, &M->capchanged, M->nchanged + 1, sizeof(int32_t));
    M->changed[M->nchanged++] = r;
}

/* The end of a sync: re-intern the records it changed, forwarding each to an equal record if there is one.
 * A sync changes every record at once: were a record forwarded while the sync still ran, it would take the
 * sync's change of the record it joined a second time (an await's retired mark, due again). */
static void settle(Machine *M) {
    for (int64_t i = 0; i < M->nchanged; i++) {
        int32_t r = M->changed[i];
        Rec *x = R(M, r);
        new_epoch(M);
        x->stamp = ++M->clock;
        x->hash = rec_hash(M, r);
        int32_t o = rtable_find(M, r);
        if (o) {
            M->ref[r].fwd = o;
            rec_incref(M, o);
            live_unlink(M, r);
            slot_release(M, r);
        } else {
            rtable_insert(M, r);
        }
    }
    M->nchanged = 0;
}

/* ---- read sets ----
 * A read set is 0 (empty), an odd value 2r+1 (the one record r: most elements have one reader), or an
 * even value 2n: list node n (a record, and the rest of the set). Lists are shared through a cache of
 * recent nodes by (record, rest): elements read by the same threads in the same order mostly share one
 * list, but nothing depends on it (two equal lists are two equal read sets). */

static inline int32_t rs_rec(Machine *M, uint32_t v) { return (v & 1) ? (int32_t)(v >> 1) : M->st.nodes[v >> 1].rec; }
static inline uint32_t rs_next(Machine *M, uint32_t v) { return (v & 1) ? 0 : M->st.nodes[v >> 1].next; }

static inline uint32_t node_hash(int32_t rec, uint32_t next) {
    return (uint32_t)mix((uint64_t)(uint32_t)rec << 32 | next, 0x9E3779B97F4A7C15ull);
}

static void rs_decref(Machine *M, uint32_t v) {
    while (v) {
        if (v & 1) {
            rec_decref(M, (int32_t)(v >> 1));
            return;
        }
        int32_t id = (int32_t)(v >> 1);
        if (--M->st.nodes[id].refs) return;
        int32_t rec = M->st.nodes[id].rec;
        v = M->st.nodes[id].next;
        M->freenode[M->nfreenode++] = id;
        new_epoch(M);
        rec_decref(M, rec);
    }
}

static inline uint64_t rec_bit(int32_t rec) { return 1ull << ((uint32_t)rec * 0x9E3779B1u >> 26); }

static inline uint64_t rs_bloom(Machine *M, uint32_t v) {
    return !v ? 0 : (v & 1) ? rec_bit((int32_t)(v >> 1)) : M->st.nodes[v >> 1].bloom;
}

/* Is record `rec` (of the running task) a member of read set v? The running task's readers come first
 * (lists grow at the head, and tasks run one after the other), so the walk stops at an older task's. */
static int rs_has(Machine *M, uint32_t v, int32_t rec) {
    if (!(rs_bloom(M, v) & rec_bit(rec))) return 0;
    for (; v; v = rs_next(M, v)) {
        if (v & 1) return (int32_t)(v >> 1) == rec;
        const Node *n = &M->st.nodes[v >> 1];
        if (n->rec == rec) return 1;
        if (n->task != M->task) return 0;
    }
    return 0;
}

void sc_release_set(Machine *M, uint32_t v) { rs_decref(M, v); }

static void rs_incref(Machine *M, uint32_t v) {
    if (v & 1) rec_incref(M, (int32_t)(v >> 1));
    else if (v) M->st.nodes[v >> 1].refs++;
}

/* The read set `next` with record `rec` added (a reference taken for the caller). */
static uint32_t rs_cons(Machine *M, int32_t rec, uint32_t next) {
    if (!next) {
        rec_incref(M, rec);
        return 2 * (uint32_t)rec + 1;
    }
    int32_t *cached = &M->ncache[node_hash(rec, next) % NCACHE];
    const Node *c = &M->st.nodes[*cached];
    if (*cached && c->refs > 0 && c->rec == rec && c->next == next) {
        M->st.nodes[*cached].refs++;
        return 2 * (uint32_t)*cached;
    }
    int32_t id;
    if (M->nfreenode) {
        id = M->freenode[--M->nfreenode];
    } else {
        if (M->nnode == M->capnode) {
            M->capnode = M->capnode ? M->capnode * 2 : 1024;
            M->st.nodes = realloc(M->st.nodes, sizeof(Node) * M->capnode);
            M->freenode = realloc(M->freenode, sizeof(int32_t) * M->capnode);
            if (!M->st.nodes || !M->freenode) abort();
        }
        id = M->nnode++;
    }
    M->st.nodes[id] = (Node){rec, next, 1, 0, R(M, rec)->task, rs_bloom(M, next) | rec_bit(rec)};
    rec_incref(M, rec);
    rs_incref(M, next);
    *cached = id;
    return 2 * (uint32_t)id;
}

/* ---- reports: who, hazards, events, histories ---- */

static void fill_acc(Machine *M, Acc *a, int site, int mask, int64_t task, const int64_t *iv) {
    a->site = site;
    a->mask = mask;
    a->task = mask ? task : -1;
    int niv = site >= 0 ? M->T->sites[site].niv : 0;
    memcpy(a->iv, iv, sizeof(int64_t) * niv);
    memset(a->iv + niv, 0, sizeof(int64_t) * (SC_MAXIV - niv));
    a->seq = M->evtotal;
}

/* A new hazard row, or NULL if (kind, name, statement) was reported already (or the run is full). */
static HazardRow *hazard(Machine *M, int kind, int64_t name, int site) {
    int64_t stmt = M->T->sites[site].stmt;
    for (int i = 0; i < M->nseen; i++)
        if (M->seen[3 * i] == kind && M->seen[3 * i + 1] == name && M->seen[3 * i + 2] == stmt) return NULL;
    if (M->nseen == M->capseen) {
        M->capseen = M->capseen ? M->capseen * 2 : 16;
        M->seen = realloc(M->seen, sizeof(int64_t) * 3 * M->capseen);
        if (!M->seen) abort();
    }
    M->seen[3 * M->nseen] = kind;
    M->seen[3 * M->nseen + 1] = name;
    M->seen[3 * M->nseen + 2] = stmt;
    M->nseen++;
    if (M->nh >= M->maxh) {
        /* Past max_hazards nothing more is reported: stop here. */
        M->truncated = 1;
        M->st.status = SC_FULL;
        return NULL;
    }
    HazardRow *h = &M->haz[M->nh++];
    memset(h, 0, sizeof(HazardRow));
    h->kind = kind;
    h->slot = -1;
    h->ordinal = h->element = -1;
    h->queue = -1;
    h->events_before = M->evtotal;
    return h;
}

static History *history(Machine *M, int64_t ordinal, int64_t e) {
    for (int i = 0; i < M->nwatch; i++)
        if (M->hist[i].ordinal == ordinal && M->hist[i].element == e) return &M->hist[i];
    return NULL;
}

/* A RAW/WAR/WAW/FREE hazard on element e of slot's buffer, `rec` the failing record ('w' or 'r'). */
static void buffer_hazard(Machine *M, int kind, int slot, int64_t e, int32_t rec, int which, int site,
                          const Acc *acc) {
    Buf *b = &M->st.bufs[slot];
    HazardRow *h = hazard(M, kind, M->sp[slot].name, site);
    if (!h) return;
    h->slot = slot;
    h->ordinal = b->ordinal;
    h->element = e;
    h->ndim = b->ndim;
    int64_t x = e;
    for (int d = b->ndim - 1; d >= 0; d--) {
        h->index[d] = x % b->dims[d];
        x /= b->dims[d];
    }
    h->acc = *acc;
    History *hi = history(M, b->ordinal, e);
    if (!hi) return;
    if (which == 'w' && hi->wrec) {
        h->other = hi->write;
        h->has_other = 1;
    } else if (which == 'r') {
        for (int i = 0; i < hi->nreads; i++)
            if (rec_find(M, hi->rrec[i]) == rec) {
                h->other = hi->reads[i];
                h->has_other = 1;
                break;
            }
    }
}

/* A DEADLOCK or COUNT hazard on a queue. */
static void queue_hazard(Machine *M, int kind, int site, int q, const Acc *acc, const Acc *other, int np,
                         const int64_t *params) {
    HazardRow *h = hazard(M, kind, -1, site);
    if (!h) return;
    h->acc = *acc;
    if (other) {
        h->other = *other;
        h->has_other = 1;
    }
    h->queue = q;
    h->nparams = np;
    memcpy(h->params, params, sizeof(int64_t) * np);
}

/* Watched element: remember this access (a write replaces the history, a read joins it). */
static void note_history(Machine *M, History *hi, int32_t rec, int write, const Acc *acc) {
    if (write) {
        if (hi->wrec) rec_decref(M, hi->wrec);
        rec_incref(M, rec);
        hi->wrec = rec;
        hi->write = *acc;
        for (int i = 0; i < hi->nreads; i++) rec_decref(M, hi->rrec[i]);
        hi->nreads = 0;
        return;
    }
    for (int i = 0; i < hi->nreads; i++)
        if (hi->rrec[i] == rec) {
            hi->reads[i] = *acc; /* the same reader again: its latest access, in its first place */
            return;
        }
    if (hi->nreads == hi->capreads) {
        hi->capreads = hi->capreads ? 2 * hi->capreads : 8;
        hi->rrec = realloc(hi->rrec, sizeof(int32_t) * hi->capreads);
        hi->reads = realloc(hi->reads, sizeof(Acc) * hi->capreads);
        if (!hi->rrec || !hi->reads) abort();
    }
    rec_incref(M, rec);
    hi->rrec[hi->nreads] = rec;
    hi->reads[hi->nreads++] = *acc;
}

static void event(Machine *M, int q, int64_t index, int64_t slot, int64_t parity, const Acc *acc) {
    M->evtotal++;
    if (M->nev >= M->maxev) return; /* the timeline is capped; sync_check says so */
    EventRow *e = &M->ev[M->nev++];
    e->queue = q;
    e->pad = 0;
    e->index = index;
    e->slot = slot;
    e->parity = parity;
    e->acc = *acc;
}

static void fail(Machine *M, int code, int queue, const Acc *acc) {
    M->st.status = SC_ERROR;
    M->err.code = code;
    M->err.queue = queue;
    M->err.has_acc = acc != NULL;
    if (acc) M->err.acc = *acc;
}

/* ---- the interface ---- */

enum { ERR_INDEX = 1, ERR_BARRIER_INDEX, ERR_DIVISION, ERR_SHAPE, ERR_ARRIVE_THREADS, ERR_AWAIT_THREADS, ERR_CTA, ERR_ALIGN, ERR_BOX };

Machine *sc_new(const Tables *T, int max_hazards, int max_events, int nwatch, const int64_t *watch) {
    Machine *M = calloc(1, sizeof(Machine));
    if (!M) abort();
    M->T = T;
    M->nw = T->nw;
    M->rw = (2 * NP + MAXMARK) * T->nw;
    M->nmasks = T->nmasks;
    M->masks = T->masks;
    memcpy(M->po, T->po, sizeof(M->po));
    memcpy(M->completion, T->completion, sizeof(M->completion));
    M->nslots = T->nslots;
    M->sp = T->slots;
    M->st.bufs = calloc(T->nslots ? T->nslots : 1, sizeof(Buf));
    M->st.ac = calloc(T->naccess ? T->naccess : 1, sizeof(AccessCache)); /* epoch 0: never valid */
    for (int k = 0; k < T->naccess; k++) M->st.ac[k].op = T->access[k];
    M->st.epoch = 1;
    M->nq = T->nqueues;
    M->qp = T->queues;
    M->qs = calloc(T->nqueues ? T->nqueues : 1, sizeof(Queue));
    for (int i = 0; i < T->nqueues; i++) M->qs[i].arr_mask = M->qs[i].await_mask = -1;
    M->fresh = calloc((size_t)4 * NP * M->nmasks, sizeof(Fresh));
    M->nwatch = nwatch;
    M->hist = calloc(nwatch ? nwatch : 1, sizeof(History));
    for (int i = 0; i < nwatch; i++) {
        M->hist[i].ordinal = watch[2 * i];
        M->hist[i].element = watch[2 * i + 1];
    }
    M->maxh = max_hazards;
    M->haz = calloc((size_t)max_hazards + 1, sizeof(HazardRow));
    M->maxev = max_events;
    M->ev = calloc((size_t)max_events + 1, sizeof(EventRow));
    M->tmp = calloc(M->nw, sizeof(uint64_t));
    M->none = calloc(M->nw, sizeof(uint64_t));
    if (!M->st.bufs || !M->st.ac || !M->qs || !M->fresh || !M->hist || !M->haz || !M->ev || !M->tmp || !M->none) abort();
    M->task = -1;
    rec_alloc(M); /* id 0: scratch */
    memset(R(M, 0), 0, sizeof(Rec));
    M->capnode = 1024;
    M->st.nodes = calloc(M->capnode, sizeof(Node));
    M->freenode = calloc(M->capnode, sizeof(int32_t));
    M->nnode = 1; /* node id 0: the empty read set */
    return M;
}

void sc_delete(Machine *M) {
    for (int i = 0; i < M->nslots; i++) {
        free(M->st.bufs[i].el);
        free(M->st.bufs[i].shard_owner);
        free(M->st.bufs[i].accessed);
    }
    for (int i = 0; i < M->nq; i++) {
        free(M->qs[i].arrives);
        free(M->qs[i].txe);
        free(M->qs[i].txd);
    }
    for (int64_t i = 0; i < M->capord; i++) {
        free(M->ord[i].threads);
        free(M->ord[i].waiters);
        free(M->ord[i].marks);
    }
    free(M->ord);
    for (int64_t i = 0; i < M->ncar; i++) free_kept_order(&M->car[i]);
    free(M->car);
    for (int i = 0; i < M->nwatch; i++) {
        free(M->hist[i].rrec);
        free(M->hist[i].reads);
    }
    free(M->st.bufs); free(M->st.ac); free(M->qs); free(M->fresh); free(M->hist); free(M->haz); free(M->seen); free(M->ev);
    free(M->tmp); free(M->none); free(M->changed); free(M->ref); free(M->freeref); free(M->rh); free(M->rb); free(M->freerec); free(M->rbuck);
    free(M->st.nodes); free(M->freenode);
    free(M);
}

const int *sc_status(Machine *M) { return &M->st.status; }

/* Something the fast path's cached transitions depend on changed (a record's value, an id freed). */
static inline void new_epoch(Machine *M) { M->st.epoch++; }

void sc_fail(Machine *M, int code, int site, const int64_t *iv) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    Acc a;
    fill_acc(M, &a, site, 0, M->task, iv);
    fail(M, code, -1, site >= 0 ? &a : NULL);
}

/* An argument or Alloc: fresh elements with no records. `owner_mask` is the allocating collective. */
void sc_alloc(Machine *M, int slot, int ndim, const int64_t *dims, int owner_mask, int device, int64_t shard_size,
              int nshards, const int32_t *shard_owners) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    Buf *b = &M->st.bufs[slot];
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0) { fail(M, ERR_SHAPE, -1, NULL); return; }
        n *= dims[d];
    }
    if (ndim > SC_MAXDIM) { M->st.status = SC_UNSUPPORTED; return; }
    b->el = calloc(n ? n : 1, sizeof(Elem));
    if (!b->el) abort();
    b->accessed = NULL;
    if (M->sp[slot].undefined) {
        b->accessed = calloc(n / 8 + 1, 1);
        if (!b->accessed) abort();
    }
    new_epoch(M);
    b->n = n;
    b->ndim = ndim;
    memcpy(b->dims, dims, sizeof(int64_t) * ndim);
    b->ordinal = M->ordinal++;
    b->owner = owner_mask;
    b->dev = device;
    b->shard_size = shard_size;
    b->shard_owner = NULL;
    if (nshards) {
        b->shard_owner = malloc(sizeof(int32_t) * nshards);
        if (!b->shard_owner) abort();
        memcpy(b->shard_owner, shard_owners, sizeof(int32_t) * nshards);
    }
    b->task = M->task;
}

static void clear_buffer(Machine *M, Buf *b) {
    for (int64_t e = 0; e < b->n; e++) {
        if (b->el[e].w) rec_decref(M, b->el[e].w);
        rs_decref(M, b->el[e].r);
        b->el[e].w = b->el[e].r = 0;
    }
}

/* Is record r all right at the free of b? (a write by the whole owning collective, or a register reuse) */
static int free_ok(Machine *M, Buf *b, int slot, int32_t r, int owner) {
    const uint64_t *own = mask_bits(M, owner);
    if (M->sp[slot].shared)
        return R(M, r)->task == b->task && subset(own, VS(M, r, P_IN_ORDER), M->nw);
    if (R(M, r)->task != b->task) return 1;
    for (int p = 0; p < NP; p++) {
        const uint64_t *va = VA(M, r, p), *vs = VS(M, r, M->completion[p]);
        for (int i = 0; i < M->nw; i++)
            if (va[i] & own[i] & ~vs[i]) return 0;
    }
    return 1;
}

static int free_ok_seen(Machine *M, Buf *b, int slot, int32_t r, int owner, uint64_t *seen) {
    const uint64_t key = (uint64_t)(uint32_t)r << 32 | (uint32_t)owner;
    uint64_t *hit = &seen[(key * 0x9E3779B97F4A7C15ull) >> 58];
    if (*hit == key) return 1;
    if (!free_ok(M, b, slot, r, owner)) return 0;
    *hit = key;
    return 1;
}

/* End of an allocation's scope: the free is checked like a write by the owners, then the memory is gone. */
void sc_free(Machine *M, int slot, int site, const int64_t *iv) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    Buf *b = &M->st.bufs[slot];
    if (b->dev) {
        uint64_t seen[64] = {0};  /* (record, owners) already found all right (elements share a few records) */
        uint64_t fine[64] = {0};  /* (element state, owners) already found all right */
        for (int64_t e = 0; e < b->n && !M->st.status; e++) {
            const int owner = b->shard_size ? b->shard_owner[e / b->shard_size] : b->owner;
            if (owner < 0) continue; /* a shard no statement uses */
            const uint64_t word = sc_elem_word(&b->el[e]), key = word ^ (uint64_t)(uint32_t)owner * 0x9E3779B97F4A7C15ull;
            uint64_t *known = &fine[(key * 0x9E3779B97F4A7C15ull) >> 58];
            if (!word || (key && *known == key)) continue;
            int32_t bad = 0, which = 'w';
            if (b->el[e].w && !free_ok_seen(M, b, slot, rec_find(M, b->el[e].w), owner, seen)) bad = rec_find(M, b->el[e].w);
            for (uint32_t v = b->el[e].r; v && !bad; v = rs_next(M, v))
                if (!free_ok_seen(M, b, slot, rec_find(M, rs_rec(M, v)), owner, seen)) {
                    bad = rec_find(M, rs_rec(M, v));
                    which = 'r';
                }
            if (bad) {
                Acc a;
                fill_acc(M, &a, site, owner, b->task, iv);
                buffer_hazard(M, K_FREE, slot, e, bad, which, site, &a);
            } else if (key) {
                *known = key;
            }
        }
    }
    clear_buffer(M, b);
    free(b->el);
    free(b->shard_owner);
    free(b->accessed);
    b->el = NULL;
    b->shard_owner = NULL;
    b->accessed = NULL;
    b->n = 0;
}

/* One read or write of element x (number e of slot's buffer) by the threads of `mask` on pair bit
 * `pair`: check its records, then record the access (its record `rec`), unless `record` is 0 (the read of
 * an update, which its write replaces: an instruction's own read never conflicts with its write). */
static void access_step(Machine *M, int slot, int64_t e, Elem *x, int mask, int pair, int write, int32_t rec,
                        int site, const int64_t *iv, int record) {
    Buf *b = &M->st.bufs[slot];
    const uint64_t *tm = mask_bits(M, mask);
    uint32_t w0 = x->w;
    if (w0) {
        int32_t w = rec_find(M, w0);
        if (w != (int32_t)w0) { /* follow the forward once and for all */
            rec_incref(M, w);
            x->w = w;
            rec_decref(M, w0);
        }
        if (R(M, w)->task != M->task || !subset(tm, VS(M, w, pair), M->nw)) {
            Acc a;
            fill_acc(M, &a, site, mask, M->task, iv);
            buffer_hazard(M, write ? K_WAW : K_RAW, slot, e, w, 'w', site, &a);
        }
    }
    if (write)
        for (uint32_t v = x->r; v; v = rs_next(M, v)) {
            int32_t r = rec_find(M, rs_rec(M, v));
            if (R(M, r)->task != M->task || !subset(tm, VS(M, r, pair), M->nw)) {
                Acc a;
                fill_acc(M, &a, site, mask, M->task, iv);
                buffer_hazard(M, K_WAR, slot, e, r, 'r', site, &a);
                break;
            }
        }
    if (!record) return;
    if (M->nwatch) {
        History *hi = history(M, b->ordinal, e);
        if (hi) {
            Acc a;
            fill_acc(M, &a, site, mask, M->task, iv);
            note_history(M, hi, rec, write, &a);
        }
    }
    if (write) {
        if ((int32_t)x->w != rec) {
            rec_incref(M, rec);
            if (x->w) rec_decref(M, x->w);
            x->w = rec;
        }
        rs_decref(M, x->r);
        x->r = 0;
    } else if (!rs_has(M, x->r, rec)) {
        uint32_t rest = x->r;
        if (rest && !(rest & 1) && M->st.nodes[rest >> 1].task != M->task && M->st.nodes[rest >> 1].next) {
            /* Readers of earlier tasks can only fail a later writer's check (WAR), the newest first: keep
             * that one (elements of global memory would otherwise keep every task's reader). */
            int32_t newest = M->st.nodes[rest >> 1].rec;
            rec_incref(M, newest);
            rs_decref(M, rest);
            x->r = rest = 2 * (uint32_t)newest + 1;
        }
        uint32_t head = rs_cons(M, rec, rest);
        rs_decref(M, rest);
        x->r = head;
    }
}

/* sc_done for Programs built with -O0 (_machine.h: SC_CALL_DONE). */
int sc_done_call(SC_State *S, int k, int slot, int64_t e, int mask) { return sc_done(S, k, slot, e, mask); }

/* An access of element e of a buffer slot (mode 1: read, 2: write, 3: update, a read then a write). */
void sc_access(Machine *M, int k, int64_t e, int mask, const int64_t *iv) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    AccessCache *cache = &M->st.ac[k];
    const int slot = cache->op.slot, pair = cache->op.pair, mode = cache->op.mode, unordered = cache->op.unordered,
              site = cache->op.site;
    Buf *b = &M->st.bufs[slot];
    if ((uint64_t)e >= (uint64_t)b->n) {
        Acc a;
        fill_acc(M, &a, site, mask, M->task, iv);
        fail(M, ERR_INDEX, -1, &a);
        return;
    }
    Elem *x = &b->el[e];
    if (b->accessed && !sc_was_accessed(b, e)) {
        /* The element's first access since its allocation (always made here: the inline path needs a state
         * that an access left, and none leaves an element with no records; a kernel boundary clears the
         * records, not this bit). A read is UNINIT, reported once per element. */
        b->accessed[e >> 3] |= (uint8_t)(1 << (e & 7));
        if (mode & 1) {
            Acc a;
            fill_acc(M, &a, site, mask, M->task, iv);
            buffer_hazard(M, K_UNINIT, slot, e, 0, 0, site, &a);
        }
    }
    const uint64_t in = sc_elem_word(x);
    const uint32_t epoch = M->st.epoch;
    /* What this access does to an element depends only on the element's state, the access (its op and
     * collective), the records' values and the ids in use (all fixed within an epoch): apply a transition
     * it made before (a hazard it met is reported once per statement anyway). Not in the second run,
     * which records histories. */
    Transition *t = &cache->t[(uint32_t)(((in ^ (uint64_t)(uint32_t)mask << 40) * 0x9E3779B97F4A7C15ull) >> 32) % SC_TRANSITIONS];
    if (!M->nwatch && t->epoch == epoch && t->mask == mask && t->in == in) {
        Elem out = {.word = t->out};
        if (out.w != x->w) {
            if (out.w) rec_incref(M, out.w);
            if (x->w) rec_decref(M, x->w);
        }
        if (out.r != x->r) {
            rs_incref(M, out.r);
            rs_decref(M, x->r);
        }
        *x = out;
    } else {
        int32_t rec = fresh_record(M, mask, pair, unordered, M->sp[slot].global_memory);
        if (mode & 1) access_step(M, slot, e, x, mask, pair, 0, rec, site, iv, mode == 1);
        if (mode & 2) access_step(M, slot, e, x, mask, pair, 1, rec, site, iv, 1);
        if (M->nwatch) return;
        if (M->st.epoch == epoch) /* else an id of `in` may be free now, and reused later */
            *t = (Transition){in, sc_elem_word(x), epoch, mask};
    }
    /* The same access again, on the element as it is now, would change nothing and report nothing new
     * (a hazard it finds is this one again): a read, or a write whose record its threads see in program
     * order. Remember that, until something it depends on changes (the epoch); and, for the inline path,
     * a read that only moved the element from one read-set list to another. */
    if (mode == 1 || (!unordered && (M->po[pair] >> pair & 1))) {
        const uint32_t from = (uint32_t)(in >> 32), to = x->r;
        const int moved = mode == 1 && M->st.epoch == epoch && (uint32_t)in == x->w && from && !(from & 1) && to &&
                          !(to & 1);
        cache->epoch = M->st.epoch;
        cache->mask = mask;
        cache->wr = sc_elem_word(x);
        cache->tin = moved ? in : 0;
        cache->tout = moved ? cache->wr : 0;
    }
}

/* V |= tm x pairs for one of V_A / V_S (sel 0 / 1); returns whether it changed. */
static int add_threads(Machine *M, int32_t r, int sel, const uint64_t *tm, uint32_t pairs, int apply) {
    int changed = 0;
    for (int p = 0; p < NP; p++) {
        if (!(pairs >> p & 1)) continue;
        uint64_t *v = sel ? VS(M, r, p) : VA(M, r, p);
        if (!subset(tm, v, M->nw)) {
            changed = 1;
            if (!apply) return 1;
            for (int i = 0; i < M->nw; i++) v[i] |= tm[i];
        }
    }
    if (apply && !is_empty(tm, M->nw)) {
        if (sel) R(M, r)->vsmask |= pairs;
        else R(M, r)->vamask |= pairs;
    }
    return changed;
}

/* ---- execution order (reference.py, _Order) ---- */

/* Are `tm`, once they synchronize, ordered after the await of order o by every thread of it? */
static int reached_by(const Machine *M, const Order *o, const uint64_t *tm) {
    return o->has_waiters ? subset(o->waiters, tm, M->nw) : intersects(o->threads, tm, M->nw);
}

/* May an arrive by `tm` take over the slot whose await order o is of? (reference.py, _Order.taken_over_by) */
static int taken_over_by(const Machine *M, const Order *o, const uint64_t *tm) {
    if (subset(tm, o->threads, M->nw)) return 1;
    return o->has_waiters && !memcmp(o->waiters, tm, sizeof(uint64_t) * M->nw);
}

/* Order o now holds `tm` (and waits for no thread of its await any more). */
static void order_join(Machine *M, Order *o, const uint64_t *tm) {
    for (int j = 0; j < M->nw; j++) {
        o->threads[j] |= tm[j];
        o->waiters[j] = 0;
    }
    o->has_waiters = 0;
}

/* `tm` have waited for each other: each is ordered after what any one was. */
static void join(Machine *M, const uint64_t *tm) {
    for (int64_t i = 0; i < M->nord; i++)
        if (reached_by(M, &M->ord[i], tm)) order_join(M, &M->ord[i], tm);
}

/* `tm` make arrive n on queue q (or a TMA load completing on its phase n): awaits of it carry their order. */
static void carry(Machine *M, const uint64_t *tm, int q, int64_t n) {
    for (int64_t i = 0; i < M->nord; i++) {
        int64_t *m = &M->ord[i].marks[q];
        if (reached_by(M, &M->ord[i], tm) && (!*m || n < *m)) *m = n;
    }
}

/* Order i is done with: its buffers move past nord, for reuse. */
static void drop_order(Machine *M, int64_t i) {
    Order o = M->ord[i];
    M->ord[i] = M->ord[--M->nord];
    M->ord[M->nord] = o;
}

static int thread_count(const uint64_t *tm, int nw) {
    int n = 0;
    for (int j = 0; j < nw; j++) n += __builtin_popcountll(tm[j]);
    return n;
}

/* An order of the await of arrive k on queue q, holding `tm` and waiting for `wm`. */
static void new_order(Machine *M, int q, int64_t k, const Acc *acc, const uint64_t *tm, const uint64_t *wm) {
    if (M->nord == M->capord) {
        int64_t cap = M->capord;
        M->ord = grow(M->ord, &cap, M->nord + 1, sizeof(Order));
        for (int64_t i = M->capord; i < cap; i++) {
            M->ord[i].threads = malloc(sizeof(uint64_t) * M->nw);
            M->ord[i].waiters = malloc(sizeof(uint64_t) * M->nw);
            M->ord[i].marks = malloc(sizeof(int64_t) * (M->nq ? M->nq : 1));
            if (!M->ord[i].threads || !M->ord[i].waiters || !M->ord[i].marks) abort();
        }
        M->capord = cap;
    }
    Order *o = &M->ord[M->nord++];
    o->q = q;
    o->k = k;
    o->acc = *acc;
    memcpy(o->threads, tm, sizeof(uint64_t) * M->nw);
    memcpy(o->waiters, wm, sizeof(uint64_t) * M->nw);
    o->has_waiters = !is_empty(wm, M->nw);
    memset(o->marks, 0, sizeof(int64_t) * M->nq);
}

/* `tm` waited for phase k of queue q: each order carried to an arrive up to k now holds them, and on a ring their
   await starts the order that arrive k + depth (or a TMA load on its slot) checks (reference.py, awaited). */
static void awaited(Machine *M, int q, int64_t k, const uint64_t *tm, const Acc *a) {
    for (int64_t i = 0; i < M->nord; i++) {
        const int64_t m = M->ord[i].marks[q];
        if (m && m <= k) order_join(M, &M->ord[i], tm);
    }
    if (M->qp[q].depth > 0) {  /* one thread is ordered after its own wait; several, after a sync of them all */
        const int one = thread_count(tm, M->nw) == 1;
        new_order(M, q, k, a, one ? tm : M->none, one ? M->none : tm);
    }
}

/* Fence(L1, L2) by `mask`: records meeting L1 x C get V_A |= L2 x C, V_S |= closure(L2) x C. */
void sc_fence(Machine *M, int mask, uint32_t m1, uint32_t m2a, uint32_t m2s, int barrier) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    const uint64_t *tm = mask_bits(M, mask);
    for (int32_t r = M->live_head, nx; r; r = nx) {
        nx = R(M, r)->next;
        if (!meets(M, r, tm, m1)) continue;
        if (!add_threads(M, r, 0, tm, m2a, 0) && !add_threads(M, r, 1, tm, m2s, 0)) continue;
        begin_update(M, r);
        add_threads(M, r, 0, tm, m2a, 1);
        add_threads(M, r, 1, tm, m2s, 1);
    }
    settle(M);
    if (barrier) join(M, tm);
}

static int mark_index(Machine *M, int32_t r, int q) {
    for (int i = 0; i < R(M, r)->nmarks; i++)
        if (R(M, r)->mq[i] == q) return i;
    return -1;
}

/* Insert a mark on queue q at arrive n into r, which has none on q (after begin_update). */
static int insert_mark(Machine *M, int32_t r, int q, int64_t n, const uint64_t *threads) {
    Rec *x = R(M, r);
    if (x->nmarks == MAXMARK) { M->st.status = SC_UNSUPPORTED; return 0; }
    int at = x->nmarks;
    while (at > 0 && x->mq[at - 1] > q) {
        x->mq[at] = x->mq[at - 1];
        x->mn[at] = x->mn[at - 1];
        memcpy(MT(M, r, at), MT(M, r, at - 1), sizeof(uint64_t) * M->nw);
        at--;
    }
    x->mq[at] = q;
    x->mn[at] = n;
    memcpy(MT(M, r, at), threads, sizeof(uint64_t) * M->nw);
    x->nmarks++;
    return 1;
}

/* Mark r pending on arrive n of queue q (keeping the earliest arrive and every marked thread). */
static void add_mark(Machine *M, int32_t r, int q, int64_t n, const uint64_t *threads) {
    Rec *x = R(M, r);
    int i = mark_index(M, r, q);
    if (i >= 0) {
        if (x->mn[i] <= n && subset(threads, MT(M, r, i), M->nw)) return;
        begin_update(M, r);
        if (n < x->mn[i]) x->mn[i] = n;
        uint64_t *t = MT(M, r, i);
        for (int j = 0; j < M->nw; j++) t[j] |= threads[j];
        return;
    }
    if (x->nmarks == MAXMARK) { M->st.status = SC_UNSUPPORTED; return; }
    begin_update(M, r);
    insert_mark(M, r, q, n, threads);
}

static void remove_mark(Machine *M, int32_t r, int i) {
    Rec *x = R(M, r);
    for (int j = i; j + 1 < x->nmarks; j++) {
        x->mq[j] = x->mq[j + 1];
        x->mn[j] = x->mn[j + 1];
        memcpy(MT(M, r, j), MT(M, r, j + 1), sizeof(uint64_t) * M->nw);
    }
    x->nmarks--;
    memset(MT(M, r, x->nmarks), 0, sizeof(uint64_t) * M->nw);
}

/* Pairing by lag counts phases per thread: every arrive (await) of a queue must be by the same threads. */
static int same_threads(Machine *M, int q, int32_t *first, int mask, int code, const Acc *acc) {
    if (!M->qp[q].same_threads || !mask) return 1;
    if (*first < 0) *first = mask;
    if (*first == mask) return 1;
    fail(M, code, q, acc);
    return 0;
}

void sc_arrive(Machine *M, int64_t q64, int mask, uint32_t m1, int site, const int64_t *iv, int64_t tx, int64_t own) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    int q = (int)q64;
    const QueueParams *P = &M->qp[q];
    Queue *Q = &M->qs[q];
    Acc a;
    fill_acc(M, &a, site, mask, M->task, iv);
    if (!same_threads(M, q, &Q->arr_mask, mask, ERR_ARRIVE_THREADS, &a)) return;
    if (Q->narr == Q->caparr) {
        Q->caparr = Q->caparr ? 2 * Q->caparr : 16;
        Q->arrives = realloc(Q->arrives, sizeof(Acc) * Q->caparr);
        Q->txe = realloc(Q->txe, sizeof(int64_t) * Q->caparr);
        if (!Q->arrives || !Q->txe) abort();
    }
    Q->arrives[Q->narr] = a;
    Q->txe[Q->narr] = tx;
    int64_t n = ++Q->narr, slot = -1, parity = -1;
    if (P->depth > 0) {
        slot = (n - 1) % P->depth;
        parity = ((n - 1) / P->depth) & 1;
        const int64_t reuse = n - P->depth; /* the arrive whose slot this takes over (<= 0: the previous scope's) */
        int found = 0, late = 0;
        for (int64_t i = M->nord - 1; i >= 0; i--) { /* several where reuse <= 0: one per earlier task's (sc_task_end) */
            if (M->ord[i].q != q || M->ord[i].k != reuse) continue;
            found = 1;
            if (!late && !taken_over_by(M, &M->ord[i], mask_bits(M, mask))) {
                late = 1;
                const int64_t params[5] = {reuse >= 1 ? 2 : 4, n, slot, P->depth, reuse};
                queue_hazard(M, K_DEADLOCK, site, q, &a, &M->ord[i].acc, 5, params);
            }
            drop_order(M, i);
        }
        if (reuse >= 1 && !found) { /* not awaited yet */
            const int64_t params[5] = {0, n, slot, P->depth, reuse};
            queue_hazard(M, K_DEADLOCK, site, q, &a, &Q->arrives[reuse - 1], 5, params);
        }
    }
    event(M, q, n, slot, parity, &a);
    if (!mask) return; /* CPU code: nothing to mark */
    const uint64_t *tm = mask_bits(M, mask);
    if (!P->scope) carry(M, tm, q, n); /* a commit group orders its own threads' async instructions only */
    for (int32_t r = M->live_head, nx; r; r = nx) {
        nx = R(M, r)->next;
        if ((!own && R(M, r)->glob) || !meets(M, r, tm, m1)) continue;
        uint64_t *mt = M->tmp;
        memset(mt, 0, sizeof(uint64_t) * M->nw);
        if (P->scope) /* scoped commit groups remember which threads' accesses they carry */
            for (int p = 0; p < NP; p++)
                if (m1 >> p & 1)
                    for (int i = 0; i < M->nw; i++) mt[i] |= VA(M, r, p)[i] & tm[i];
        add_mark(M, r, q, n, mt);
    }
    settle(M);
}

/* Phase n of queue q must receive exactly the TMA bytes its arrive expects (else a TX hazard). */
static void check_tx(Machine *M, int q, int64_t n, int site, const Acc *acc) {
    Queue *Q = &M->qs[q];
    const int64_t expected = n <= Q->narr ? Q->txe[n - 1] : 0, delivered = n <= Q->ntxd ? Q->txd[n] : 0;
    if (expected != delivered) {
        const int64_t params[3] = {n, expected, delivered};
        queue_hazard(M, K_TX, site, q, acc, n <= Q->narr ? &Q->arrives[n - 1] : NULL, 3, params);
    }
}

/* A TMA load lands on the slot of phase n of queue q whatever phase the slot is in: unless arrive n came
   already, its issuers must be ordered after the await of arrive n - depth (reference.py, check_landing_slot). */
static void check_landing_slot(Machine *M, int q, int64_t n, int mask, const Acc *a) {
    const QueueParams *P = &M->qp[q];
    const Queue *Q = &M->qs[q];
    const int64_t reuse = n - P->depth;
    if (P->depth <= 0 || Q->narr >= n) return;
    int found = 0;
    const Acc *late = NULL; /* the await of an order the issuers are not ordered after */
    for (int64_t i = 0; i < M->nord && !late; i++) {
        if (M->ord[i].q != q || M->ord[i].k != reuse) continue;
        found = 1;
        if (!subset(mask_bits(M, mask), M->ord[i].threads, M->nw)) late = &M->ord[i].acc;
    }
    if (!late && (found || reuse < 1)) return; /* ordered, or a slot no earlier phase used */
    const Acc *other = late ? late : reuse <= Q->narr ? &Q->arrives[reuse - 1] : NULL;
    const int64_t params[5] = {5, n, (n - 1) % P->depth, P->depth, reuse};
    queue_hazard(M, K_DEADLOCK, a->site, q, a, other, 5, params);
}

/* A TMA load by `mask` completes on the phase the issuer's next arrive on queue `own` closes, on each of the
   nq queues `qs`, delivering tx bytes to each (program.Trail): its fresh record becomes pending there. */
void sc_trail(Machine *M, int mask, int pair, int64_t own, int nq, const int64_t *qs, int64_t tx, int site,
              const int64_t *iv) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    const int64_t n = M->qs[own].narr + 1;
    Acc a;
    fill_acc(M, &a, site, mask, M->task, iv);
    for (int i = 0; i < nq; i++) check_landing_slot(M, (int)qs[i], n, mask, &a);
    for (int i = 0; i < nq; i++) {
        Queue *Q = &M->qs[qs[i]];
        if (n >= Q->captxd) {
            int64_t cap = Q->captxd ? Q->captxd : 16;
            while (cap <= n) cap *= 2;
            Q->txd = realloc(Q->txd, sizeof(int64_t) * cap);
            if (!Q->txd) abort();
            memset(Q->txd + Q->captxd, 0, sizeof(int64_t) * (cap - Q->captxd));
            Q->captxd = cap;
        }
        Q->txd[n] += tx;
        if (n > Q->ntxd) Q->ntxd = n;
        carry(M, mask_bits(M, mask), (int)qs[i], n); /* the phase completes only once the load issued now does */
    }
    memset(M->tmp, 0, sizeof(uint64_t) * M->nw);
    for (int glob = 0; glob < 2; glob++) { /* the load's shared memory writes and global memory reads */
        int32_t r = find_fresh(M, mask, pair, 0, glob);
        if (!r) continue;
        begin_update(M, r); /* every mark at once: the fresh record has none */
        for (int i = 0; i < nq; i++)
            if (mark_index(M, r, (int)qs[i]) < 0 && !insert_mark(M, r, (int)qs[i], n, M->tmp)) break;
    }
    settle(M);
}

/* Threads grown to whole aligned groups of `scope` (a warpgroup's commit queue). */
static void widen(Machine *M, const uint64_t *in, uint64_t *out, int scope) {
    int nthreads = M->nw * 64;
    memset(out, 0, sizeof(uint64_t) * M->nw);
    for (int g = 0; g < nthreads; g += scope) {
        int any = 0;
        for (int t = g; t < g + scope && !any; t++) any = in[t >> 6] >> (t & 63) & 1;
        if (any)
            for (int t = g; t < g + scope; t++) out[t >> 6] |= 1ull << (t & 63);
    }
}

void sc_await(Machine *M, int64_t q64, int mask, uint32_t m2a, uint32_t m2s, int64_t N, int site, const int64_t *iv) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    int q = (int)q64;
    const QueueParams *P = &M->qp[q];
    Queue *Q = &M->qs[q];
    Acc a;
    fill_acc(M, &a, site, mask, M->task, iv);
    if (!same_threads(M, q, &Q->await_mask, mask, ERR_AWAIT_THREADS, &a)) return;
    Q->awaits++;
    int64_t k = P->lag >= 0 ? Q->awaits - P->lag : Q->narr - N, slot = -1, parity = -1;
    if (P->depth > 0 && k >= 1) {
        slot = (k - 1) % P->depth;
        parity = ((k - 1) / P->depth) & 1;
    }
    event(M, q, k, slot, parity, &a);
    if (k > Q->narr) { /* the paired arrive is in the future: the GPU waits forever */
        const int64_t params[3] = {1, k, Q->narr};
        queue_hazard(M, K_DEADLOCK, site, q, &a, NULL, 3, params);
        return;
    }
    if (k < 1) return;
    check_tx(M, q, k, site, &a);
    if (k > Q->upto) Q->upto = k;
    const uint64_t *tm = mask_bits(M, mask);
    awaited(M, q, k, tm, &a);
    if (!mask) return;
    int64_t floor = P->lag >= 0 ? Q->awaits + 1 - P->lag : Q->narr - P->max_wait_n;
    uint64_t *c2 = M->tmp;
    for (int32_t r = M->live_head, nx; r; r = nx) {
        nx = R(M, r)->next;
        int i = mark_index(M, r, q);
        if (i < 0) continue;
        int64_t n = R(M, r)->mn[i];
        if (n == 0 && !P->scope && covers_all(M, r, tm, m2a)) continue; /* due for every later await anyway */
        const uint64_t *c = tm;
        if (P->scope == 1) {
            for (int j = 0; j < M->nw; j++) c2[j] = MT(M, r, i)[j] & tm[j];
            c = c2;
        } else if (P->scope) {
            widen(M, MT(M, r, i), c2, P->scope);
            for (int j = 0; j < M->nw; j++) c2[j] &= tm[j];
            c = c2;
        }
        int grow = n <= k && (add_threads(M, r, 0, c, m2a, 0) || add_threads(M, r, 1, c, m2s, 0));
        int retire = 0 < n && n <= floor;
        if (!grow && !retire) continue;
        begin_update(M, r);
        if (grow) {
            add_threads(M, r, 0, c, m2a, 1);
            add_threads(M, r, 1, c, m2s, 1);
        }
        if (retire) R(M, r)->mn[i] = 0;
    }
    settle(M);
}

/* The generated scope end: awaiting threads wait for the phases their first `lag` awaits skipped, ordered
   after those arrives as by awaits (reference.py, drain). */
static void drain(Machine *M, int q, const Acc *a) {
    const QueueParams *P = &M->qp[q];
    const Queue *Q = &M->qs[q];
    if (P->lag <= 0 || Q->await_mask < 0) return;
    const uint64_t *tm = mask_bits(M, Q->await_mask);
    for (int64_t k = Q->upto + 1; k <= Q->narr; k++) awaited(M, q, k, tm, a);
}

/* End of a barrier's scope: every arrive must have been awaited (but a ring's last `lag`). */
void sc_end_barrier(Machine *M, int q0, int nq, int site, const int64_t *iv) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    Acc end;
    fill_acc(M, &end, site, 0, M->task, iv);
    for (int q = q0; q < q0 + nq; q++) drain(M, q, &end);
    /* The next scope reuses the mbarriers, counting on: its arrive j takes over the slot of arrive narr + j - depth
       of this one. The awaits of this scope's last `depth` arrives stay, as orders j - depth (<= 0), for the arrive
       (or TMA load) taking their slot over to check (sc_arrive); the other orders of these queues go. */
    for (int64_t i = M->nord - 1; i >= 0; i--) {
        Order *o = &M->ord[i];
        if (o->q >= q0 && o->q < q0 + nq) {
            o->k -= M->qs[o->q].narr;
            if (o->k <= -M->qp[o->q].depth) {
                drop_order(M, i);
                continue;
            }
        }
        memset(o->marks + q0, 0, sizeof(int64_t) * nq);
    }
    for (int q = q0; q < q0 + nq; q++) {
        const QueueParams *P = &M->qp[q];
        Queue *Q = &M->qs[q];
        int64_t slack = P->lag >= 0 ? P->lag : 0;
        if (Q->narr - Q->upto > slack) {
            const int64_t params[2] = {Q->narr - Q->upto, slack};
            queue_hazard(M, K_COUNT, site, q, &Q->arrives[Q->upto], NULL, 2, params);
        } else if (P->lag > 0 && Q->awaits < Q->narr) { /* the generated scope end waits for the awaits' phases only */
            const int64_t params[3] = {Q->narr, Q->awaits, P->lag};
            queue_hazard(M, K_COUNT, site, q, &Q->arrives[Q->awaits], NULL, 3, params);
        }
        Acc a; /* phases no await checked (a ring's last lag; loads no arrive closes) */
        fill_acc(M, &a, site, 0, M->task, iv);
        if (P->lag > 0 && Q->awaits > Q->narr) { /* the generated scope end waits for the phases of every await */
            const int64_t params[4] = {3, Q->awaits, Q->narr, P->lag};
            queue_hazard(M, K_DEADLOCK, site, q, &a, NULL, 4, params);
        }
        for (int64_t n = Q->upto + 1, last = Q->narr > Q->ntxd ? Q->narr : Q->ntxd; n <= last; n++)
            check_tx(M, q, n, site, &a);
        for (int32_t r = M->live_head, nx; r; r = nx) {
            nx = R(M, r)->next;
            int i = mark_index(M, r, q);
            if (i < 0) continue;
            begin_update(M, r);
            remove_mark(M, r, i);
        }
        if (Q->txd) memset(Q->txd, 0, sizeof(int64_t) * (Q->ntxd + 1));
        Q->narr = Q->awaits = Q->upto = Q->ntxd = 0; /* arr_mask, await_mask: the phase counters live on */
    }
    settle(M);
}

/* A task is its own top-level collective: its records are synced only while it runs. It inherits the orders
   every earlier task left to a barrier's next scope (sc_task_end). */
void sc_task_begin(Machine *M) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    new_epoch(M);
    M->task = M->ntasks++;
    M->live_head = 0;
    for (int64_t i = 0; i < M->ncar; i++)
        new_order(M, M->car[i].q, M->car[i].k, &M->car[i].acc, M->car[i].threads, M->car[i].waiters);
}

/* The orders left for a barrier's next scope are the obligations of the CTA's next task, which on the GPU is the
   task a grid's width later, not the checker's next: kept (once per thread set) for every later task. */
static void keep_for_later_tasks(Machine *M, const Order *o) {
    for (int64_t i = 0; i < M->ncar; i++)
        if (M->car[i].q == o->q && M->car[i].k == o->k && !memcmp(M->car[i].threads, o->threads, sizeof(uint64_t) * M->nw)
            && !memcmp(M->car[i].waiters, o->waiters, sizeof(uint64_t) * M->nw))
            return;
    M->car = grow(M->car, &M->capcar, M->ncar + 1, sizeof(Order));
    Order *c = &M->car[M->ncar++];
    *c = *o;
    c->marks = NULL;
    c->threads = malloc(sizeof(uint64_t) * M->nw);
    c->waiters = malloc(sizeof(uint64_t) * M->nw);
    if (!c->threads || !c->waiters) abort();
    memcpy(c->threads, o->threads, sizeof(uint64_t) * M->nw);
    memcpy(c->waiters, o->waiters, sizeof(uint64_t) * M->nw);
}

void sc_task_end(Machine *M) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    new_epoch(M);
    for (int64_t i = 0; i < M->nord; i++) keep_for_later_tasks(M, &M->ord[i]);
    M->nord = 0;
    for (int32_t r = M->live_head, nx; r; r = nx) {
        nx = R(M, r)->next;
        /* A mark outliving the task means a barrier scope around several tasks: not compiled. */
        if (R(M, r)->nmarks) M->st.status = SC_UNSUPPORTED;
        R(M, r)->live = 0;
    }
    M->live_head = 0;
    M->task = -1;
}

/* A device-function boundary is a full barrier: every live buffer forgets its records (and the next launch
   initialises its barriers: no order carries over). */
void sc_device_boundary(Machine *M) {
    if (M->st.status) return; /* a run that is full or failed does nothing more */
    new_epoch(M);
    M->nord = 0;
    for (int64_t i = 0; i < M->ncar; i++) free_kept_order(&M->car[i]);
    M->ncar = 0;
    for (int i = 0; i < M->nslots; i++)
        if (M->st.bufs[i].el) clear_buffer(M, &M->st.bufs[i]);
    for (uint32_t b = 0; b < M->nrbuck; b++) {
        for (int32_t r = M->rbuck[b]; r; r = R(M, r)->hnext) R(M, r)->intable = 0;
        M->rbuck[b] = 0;
    }
    M->nrtable = 0;
}

/* ---- results, read by sync_check through ctypes ---- */

int sc_n_hazards(Machine *M) { return M->nh; }
const HazardRow *sc_hazards(Machine *M) { return M->haz; }
int sc_truncated(Machine *M) { return M->truncated; }
int64_t sc_n_events(Machine *M) { return M->nev; }
int64_t sc_events_total(Machine *M) { return M->evtotal; }
const EventRow *sc_events(Machine *M) { return M->ev; }
const ErrorRow *sc_error(Machine *M) { return &M->err; }
