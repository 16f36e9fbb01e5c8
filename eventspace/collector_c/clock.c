/* Part of the compiled collector (module.c includes it after record.h): the collectors' clock (clock_ns,
 * clock_source). Relies on: CLOCK_MONOTONIC, and the kernel's own choice of clocksource (read from
 * /sys) to decide whether the TSC may stand for it; on nothing of Python's but the GIL. */

/* -- the clock ------------------------------------------------------------------------------
 *
 * CLOCK_MONOTONIC, as time.monotonic_ns (eventspace.clock.monotonic_clock): the pure and the
 * compiled collectors' records are on one clock. Every collected call reads it twice, and
 * clock_gettime costs 21 ns here (vDSO), half of what a compiled MPI collector adds to a call.
 * Where the kernel itself keeps CLOCK_MONOTONIC on the TSC (its clocksource is "tsc": it found
 * the counter constant-rate and in step across CPUs), the time is the TSC (9 ns) scaled to
 * nanoseconds from an anchor: a CLOCK_MONOTONIC reading taken at least every millisecond, so
 * that the two never part by more than a millisecond's worth of the rate's error (about 2 ppm
 * after calibration: a few ns), and the rate itself measured again each second (it follows
 * NTP's slewing of CLOCK_MONOTONIC). Until the first 10 ms have calibrated the rate, and where
 * the clocksource is not the TSC, every reading is clock_gettime's. The time handed out never
 * goes back (a new anchor may be a few ns behind the scaled TSC): a call's end is never before
 * its start. All of it runs with the GIL held, which serialises the shared state. */

#define MS 1000000LL

static struct {
    int tsc;                    /* read the TSC (the kernel's clocksource is the TSC) */
    int calibrated;             /* `mult` measured: the TSC is read, else clock_gettime */
    uint64_t cal_tsc;           /* the pair that starts the window the rate is measured over */
    int64_t cal_ns;
    uint64_t anchor_tsc;        /* the latest CLOCK_MONOTONIC reading and the TSC's then */
    int64_t anchor_ns;
    uint64_t mult;              /* ns per tick, 32.32 fixed point */
    uint64_t reanchor;          /* ticks between anchors (a millisecond's) */
    int64_t last;               /* the latest time handed out */
} clk;

static inline int64_t
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
#define TSC_READ() __rdtsc()

/* Whether the kernel keeps its clocks on the TSC (Linux: the current clocksource). */
static int
kernel_clock_is_tsc(void)
{
    char name[32] = {0};
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f == NULL)
        return 0;
    int ok = fgets(name, sizeof name, f) != NULL && strcmp(name, "tsc\n") == 0;
    fclose(f);
    return ok;
}

/* A CLOCK_MONOTONIC reading and the TSC at it: the middle of the TSC read before and after, of
 * the tightest of a few tries (a process switched out between them, on a loaded machine, would
 * put the middle milliseconds off; a reading takes some 50 ticks). */
static int64_t
clock_pair(uint64_t *tsc)
{
    uint64_t best = UINT64_MAX;
    int64_t ns = 0;
    for (int i = 0; i < 8 && best > 2000; i++) {
        uint64_t before = TSC_READ();
        int64_t read = monotonic_ns();
        uint64_t window = TSC_READ() - before;
        if (window < best) {
            best = window;
            ns = read;
            *tsc = before + window / 2;
        }
    }
    return ns;
}

/* The slow path, taken at most once a millisecond once calibrated: a new anchor, and each
 * second (10 ms for the first) the rate over the window since the last. */
static int64_t
tsc_anchor(void)
{
    uint64_t tsc = 0;
    int64_t ns = clock_pair(&tsc);
    if (clk.cal_ns == 0) {
        clk.cal_ns = ns;
        clk.cal_tsc = tsc;
    } else if (ns - clk.cal_ns >= (clk.calibrated ? 1000 * MS : 10 * MS) && tsc > clk.cal_tsc) {
        clk.mult = (uint64_t)(((unsigned __int128)(ns - clk.cal_ns) << 32) / (tsc - clk.cal_tsc));
        clk.reanchor = clk.mult ? (uint64_t)(((unsigned __int128)MS << 32) / clk.mult) : 0;
        clk.calibrated = clk.mult != 0 && clk.reanchor != 0;
        clk.cal_ns = ns;
        clk.cal_tsc = tsc;
    }
    clk.anchor_ns = ns;
    clk.anchor_tsc = tsc;
    return ns;
}

static inline int64_t
clock_ns(void)
{
    int64_t t;
    if (clk.calibrated) {
        uint64_t ticks = TSC_READ() - clk.anchor_tsc;   /* before the anchor (another CPU's TSC a
                                                           tick behind): wraps, so re-anchors */
        t = ticks < clk.reanchor ? clk.anchor_ns + (int64_t)((ticks * clk.mult) >> 32) : tsc_anchor();
    } else {
        t = clk.tsc ? tsc_anchor() : monotonic_ns();
    }
    if (t < clk.last)
        t = clk.last;
    clk.last = t;
    return t;
}
#else
static int
kernel_clock_is_tsc(void)
{
    return 0;
}

static inline int64_t
clock_ns(void)
{
    return monotonic_ns();
}
#endif

static inline int64_t
now(int64_t offset_ns)
{
    return clock_ns() + offset_ns;
}

/* _collector.clock_ns(): the collectors' clock, for tests and for what compares with it. */
static PyObject *
py_clock_ns(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong(clock_ns());
}

/* _collector.clock_source(): "tsc" or "clock_gettime", what the collectors read now. */
static PyObject *
py_clock_source(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyUnicode_FromString(clk.calibrated ? "tsc" : "clock_gettime");
}
