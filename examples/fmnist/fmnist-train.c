/* fmnist-train.c: data-parallel training of a small MLP on Fashion-MNIST with
 * libddl, the example program of ddl.
 *
 * Every rank holds the whole data set and a full replica of the model
 * (784-256-10, ReLU, softmax cross-entropy).  Rank 0 draws the initial
 * weights and broadcasts them; each step, every rank computes the gradient
 * of its contiguous shard of the global batch, one ddl_allreduce() on the
 * flat gradient buffer sums the shards into the batch-mean gradient, and
 * every rank applies the same SGD-with-momentum update, so the replicas stay
 * bit-identical.  The end of the run checks that with a CRC-32 of every
 * rank's weights.  Run it with `ddlrun -n 4 examples/fmnist/fmnist-train`,
 * or alone as a world of one rank; see examples/fmnist/README.md.
 *
 * With --hidden LIST the MLP has several hidden layers (784-1024-1024-512-10
 * ...); with --overlap 1 or --comm sfb|auto the gradient travels through
 * libddl's gradient exchange (ddl_gradx_*): each layer's gradient is handed
 * over as soon as backward has it, fully connected layers possibly as
 * sufficient factors, and the update of each layer waits only for its own
 * (see the "exchange" section below).
 *
 * With --device cuda (fmnist-train-cuda, this file built with FMNIST_CUDA
 * when configure finds nvcc and cuBLAS), the same model trains on each rank's GPU: parameters,
 * gradient and activations in device memory (fmnist_cuda.cu), the gradient
 * allreduced in place on the device buffer by libddl.
 */
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "ddl.h"
#include "idx.h"
#ifdef FMNIST_CUDA
#include "fmnist_cuda.h"
#endif

#ifndef OPENBLAS_VERSION
/* A cblas.h from another BLAS: the library linked is still OpenBLAS. */
extern void openblas_set_num_threads(int num_threads);
#endif

#define PROG "fmnist-train"
#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

#define SIDE 28
#define N_IN (SIDE * SIDE)
#define N_HID 256
#define N_OUT 10

#define MAX_HIDDEN 8 /* hidden layers of --hidden */
#define MAX_WIDTH 8192

/* The model: dim[0] = N_IN inputs, dim[1..nl-1] hidden widths, dim[nl] =
 * N_OUT; layer l maps dim[l] to dim[l+1].  All parameters (and all
 * gradients) live in one flat float buffer, so that one allreduce can move
 * the whole gradient: W_l [dim[l] x dim[l+1]] row-major at off_w[l], then
 * b_l [dim[l+1]] at off_b[l], layer after layer (784-256-10 by default:
 * W1, b1, W2, b2). */
typedef struct {
    int nl; /* weight layers: hidden layers + 1 */
    int dim[MAX_HIDDEN + 2];
    size_t off_w[MAX_HIDDEN + 1], off_b[MAX_HIDDEN + 1];
    size_t n_params;
    int max_width; /* widest hidden layer */
} net_t;
static net_t net;
#define N_PARAMS (net.n_params)

/* mem_copy: a checkpoint kept in memory for --warm-restart (step `iter`,
 * -1 for none, taken by rank `rank` of a world of `size`). */
struct mem_copy {
    float *params, *velocity;
    double stats[3];
    int64_t iter;
    int rank, size;
};

static void net_init(const int *hidden, int nh)
{
    net.nl = nh + 1;
    net.dim[0] = N_IN;
    for (int i = 0; i < nh; i++)
        net.dim[i + 1] = hidden[i];
    net.dim[nh + 1] = N_OUT;
    size_t off = 0;
    net.max_width = 1;
    for (int l = 0; l < net.nl; l++) {
        net.off_w[l] = off;
        off += (size_t)net.dim[l] * (size_t)net.dim[l + 1];
        net.off_b[l] = off;
        off += (size_t)net.dim[l + 1];
        if (l > 0 && net.dim[l] > net.max_width)
            net.max_width = net.dim[l];
    }
    net.n_params = off;
}

/* Inputs are standardised with the pixel mean and standard deviation of the
 * Fashion-MNIST training set (of pixel / 255), which lets plain SGD train
 * faster than raw [0, 1] inputs do. */
#define PIXEL_MEAN 0.2860f
#define PIXEL_STD 0.3530f

#define MAX_TRAIN 60000
#define MAX_BATCH MAX_TRAIN
#define MAX_EPOCHS 1000
#define EVAL_ROWS 256 /* rows per evaluation chunk, at least */

/* Exit status of --device cuda where it cannot run (automake's "skipped"). */
#define EXIT_NO_GPU 77

typedef struct {
    const char *data_dir;
    long batch;
    double lr;
    double momentum;
    uint64_t seed;
    long epochs;
    long limit; /* 0: no limit */
    long ckpt_every;      /* --checkpoint-every: iterations, 0 none */
    int ckpt_async;       /* --checkpoint-async: DDL_CKPT_ASYNC */
    const char *ckpt_dir; /* --checkpoint-dir, else $DDL_CHECKPOINT_DIR */
    int cuda;             /* --device cuda */
    int hidden[MAX_HIDDEN]; /* --hidden */
    int nhidden;
    int comm;               /* --comm: COMM_FULL, COMM_SFB, COMM_AUTO */
    int overlap;            /* --overlap 0|1 */
    long pace_ms;         /* --pace: sleep after each step, 0 none */
    long slow_rank;       /* --slow-rank: the rank --slow-pct slows, -1 none */
    long slow_pct;        /* --slow-pct: its extra compute, percent */
    long slow_steps;      /* --slow-steps: only the first N steps, 0: all */
    int warm;             /* --warm-restart: ddl_warm_enable() */
} options_t;

enum { COMM_FULL, COMM_SFB, COMM_AUTO };
static const char *const comm_names[] = {"full", "sfb", "auto"};

/* Per-rank scratch for a chunk of at most rows samples. */
typedef struct {
    size_t rows;
    float *x;                   /* rows x N_IN: standardised inputs */
    float *h[MAX_HIDDEN];       /* rows x dim[l+1]: hidden activations after ReLU */
    float *z;                   /* rows x N_OUT: logits, then their gradient */
    float *dh[MAX_HIDDEN];      /* rows x dim[l+1]: gradient of hidden layer l's outputs */
} work_t;

typedef struct {
    idx_t images, labels;
} dataset_t;

/* ------------------------------------------------------------------ output */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static void die(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void die(int status, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs(PROG ": ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(status);
}

/* check: stop the program if a libddl call failed.  Peers learn of it
 * through their own collectives failing. */
static void check(ddl_status_t st, const char *call)
{
    if (st != DDL_OK)
        die(1, "%s failed: %s: %s", call, ddl_status_str(st), ddl_last_error());
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p)
        die(1, "out of memory for %zu x %zu bytes", n, size);
    return p;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ----------------------------------------------------------------- options */

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: " PROG " [OPTION]...\n"
            "Train an MLP (784-256-10 by default) on Fashion-MNIST, data-parallel with\n"
            "libddl.\n"
            "Run it under `ddlrun -n N` (or alone, as a world of one rank).\n"
            "\n"
            "  --data DIR       directory of the {train,t10k}-*-ubyte.gz files\n"
            "                   (default: $DDL_FMNIST_DIR, else " DEFAULT_DATA_DIR ")\n"
            "  --epochs N       passes over the training set, 1..%d (default 3)\n"
            "  --batch N        global batch size, split across ranks, 1..%d\n"
            "                   (default 128)\n"
            "  --lr X           learning rate, 0 < X <= 10 (default 0.02)\n"
            "  --momentum X     SGD momentum, 0 <= X < 1 (default 0.9)\n"
            "  --seed N         seed of initialisation and shuffling,\n"
            "                   0..18446744073709551615 (default 42)\n"
            "  --limit N        use only N training samples per epoch and the first N\n"
            "                   test samples, 1..%d (default: all)\n"
            "  --checkpoint-every N\n"
            "                   commit a checkpoint (weights, momentum, position and\n"
            "                   the epoch's statistics so far) every N iterations,\n"
            "                   1..1000000 (default: none); a run that finds one in the\n"
            "                   directory resumes from it, bit for bit\n"
            "  --checkpoint-dir DIR\n"
            "                   where (default: $DDL_CHECKPOINT_DIR, which\n"
            "                   ddlrun --checkpoint-dir sets)\n"
            "  --checkpoint-keep K\n"
            "                   keep the newest K committed checkpoints (default 3;\n"
            "                   -1: every one)\n"
            "  --checkpoint-async\n"
            "                   write checkpoints in the background (libddl's async\n"
            "                   mode): training waits only for the copy\n"
            "  --hidden LIST    the hidden layers' widths, comma-separated, 1..%d layers\n"
            "                   of 1..%d (default 256; e.g. 1024,1024,512)\n"
            "  --comm full|sfb|auto\n"
            "                   how fully connected layers' gradients travel: the full\n"
            "                   matrix (default), their sufficient factors, or per layer\n"
            "                   as libddl's cost model decides (see DDL_SFB)\n"
            "  --overlap 0|1    1: hand each layer's gradient to libddl's gradient\n"
            "                   exchange as soon as backward has it, in the background;\n"
            "                   0 (default): exchange after backward, blocking\n"
            "  --pace MS        sleep MS milliseconds after each step (a slower model,\n"
            "                   for demonstrations of stopping and requeueing)\n"
            "  --slow-rank R --slow-pct P\n"
            "                   make rank R a straggler: before each step it sleeps P %%\n"
            "                   (1..1000) of its previous step's compute (with --pace)\n"
            "                   (for tests of the agents' straggler detection)\n"
            "  --slow-steps N   ...only in the first N steps of the run (default: all)\n"
            "  --warm-restart   after a failure elsewhere, stay running: rejoin the new\n"
            "                   generation and go on from the last committed checkpoint,\n"
            "                   kept in memory (ddl_warm_enable; CPU, --comm full,\n"
            "                   --overlap 0; an async checkpoint not yet committed is\n"
            "                   dropped, and the one before read from disk)\n"
            "  --device cpu|cuda\n"
            "                   where to train: the CPU with OpenBLAS (default), or\n"
            "                   this rank's GPU with cuBLAS (exit 77 if there is none)\n"
            "  --help           show this help and exit\n"
            "\n"
            "Rank 0 prints one line per epoch; every rank prints the CRC-32 of its\n"
            "weights, and the program exits 1 if the replicas differ.\n",
            MAX_EPOCHS, MAX_BATCH, MAX_TRAIN, MAX_HIDDEN, MAX_WIDTH);
}

static void bad_option(const char *opt, const char *value, const char *range)
{
    die(2, "--%s: invalid value '%s': expected %s (see --help)", opt, value, range);
}

static long parse_long_opt(const char *opt, const char *text, long min, long max)
{
    char *end, range[96];
    snprintf(range, sizeof range, "an integer in %ld..%ld", min, max);
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || v < min || v > max)
        bad_option(opt, text, range);
    return v;
}

static double parse_double_opt(const char *opt, const char *text, double min,
                               int min_open, double max, int max_open,
                               const char *range)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(v) ||
        (min_open ? v <= min : v < min) || (max_open ? v >= max : v > max))
        bad_option(opt, text, range);
    return v;
}

static uint64_t parse_seed_opt(const char *text)
{
    char *end;
    const char *p = text;
    while (*p == ' ' || *p == '\t')
        p++;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (*p == '-' || *p == '+' || end == p || *end != '\0' || errno != 0)
        bad_option("seed", text, "an integer in 0..18446744073709551615");
    return (uint64_t)v;
}

/* parse_hidden: --hidden LIST, e.g. 1024,1024,512. */
static int ckpt_keep; /* --checkpoint-keep: 0 libddl's default (3), -1 all */

static void parse_hidden(const char *text, options_t *o)
{
    char range[96];
    snprintf(range, sizeof range, "1..%d comma-separated widths of 1..%d", MAX_HIDDEN,
             MAX_WIDTH);
    const char *p = text;
    o->nhidden = 0;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < 1 || v > MAX_WIDTH || o->nhidden == MAX_HIDDEN ||
            (*end != ',' && *end != '\0'))
            bad_option("hidden", text, range);
        o->hidden[o->nhidden++] = (int)v;
        if (*end == '\0')
            break;
        p = end + 1;
    }
}

static void parse_options(int argc, char **argv, options_t *o)
{
    enum { OPT_DATA = 256, OPT_EPOCHS, OPT_BATCH, OPT_LR, OPT_MOMENTUM, OPT_SEED,
           OPT_LIMIT, OPT_CKPT_EVERY, OPT_CKPT_DIR, OPT_CKPT_ASYNC, OPT_DEVICE,
           OPT_HIDDEN, OPT_COMM, OPT_OVERLAP, OPT_PACE, OPT_SLOW_RANK, OPT_SLOW_PCT,
           OPT_SLOW_STEPS, OPT_WARM, OPT_CKPT_KEEP, OPT_HELP };
    static const struct option longopts[] = {
        {"data", required_argument, NULL, OPT_DATA},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"lr", required_argument, NULL, OPT_LR},
        {"momentum", required_argument, NULL, OPT_MOMENTUM},
        {"seed", required_argument, NULL, OPT_SEED},
        {"limit", required_argument, NULL, OPT_LIMIT},
        {"checkpoint-every", required_argument, NULL, OPT_CKPT_EVERY},
        {"checkpoint-dir", required_argument, NULL, OPT_CKPT_DIR},
        {"checkpoint-async", no_argument, NULL, OPT_CKPT_ASYNC},
        {"checkpoint-keep", required_argument, NULL, OPT_CKPT_KEEP},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"hidden", required_argument, NULL, OPT_HIDDEN},
        {"comm", required_argument, NULL, OPT_COMM},
        {"overlap", required_argument, NULL, OPT_OVERLAP},
        {"pace", required_argument, NULL, OPT_PACE},
        {"slow-rank", required_argument, NULL, OPT_SLOW_RANK},
        {"slow-pct", required_argument, NULL, OPT_SLOW_PCT},
        {"slow-steps", required_argument, NULL, OPT_SLOW_STEPS},
        {"warm-restart", no_argument, NULL, OPT_WARM},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    const char *env = getenv("DDL_FMNIST_DIR"), *ckenv = getenv("DDL_CHECKPOINT_DIR");
    *o = (options_t){
        .data_dir = env && *env ? env : DEFAULT_DATA_DIR,
        .batch = 128,
        .lr = 0.02,
        .momentum = 0.9,
        .seed = 42,
        .epochs = 3,
        .limit = 0,
        .ckpt_dir = ckenv && *ckenv ? ckenv : NULL,
        .hidden = {N_HID},
        .nhidden = 1,
        .slow_rank = -1,
    };
    int c;
    opterr = 0; /* our own messages, below */
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_DATA:
            if (!*optarg)
                bad_option("data", optarg, "a directory");
            o->data_dir = optarg;
            break;
        case OPT_EPOCHS:
            o->epochs = parse_long_opt("epochs", optarg, 1, MAX_EPOCHS);
            break;
        case OPT_BATCH:
            o->batch = parse_long_opt("batch", optarg, 1, MAX_BATCH);
            break;
        case OPT_LR:
            o->lr = parse_double_opt("lr", optarg, 0, 1, 10, 0,
                                     "a number with 0 < X <= 10");
            break;
        case OPT_MOMENTUM:
            o->momentum = parse_double_opt("momentum", optarg, 0, 0, 1, 1,
                                           "a number with 0 <= X < 1");
            break;
        case OPT_SEED:
            o->seed = parse_seed_opt(optarg);
            break;
        case OPT_LIMIT:
            o->limit = parse_long_opt("limit", optarg, 1, MAX_TRAIN);
            break;
        case OPT_CKPT_EVERY:
            o->ckpt_every = parse_long_opt("checkpoint-every", optarg, 1, 1000000);
            break;
        case OPT_CKPT_ASYNC:
            o->ckpt_async = 1;
            break;
        case OPT_CKPT_KEEP:
            ckpt_keep = (int)parse_long_opt("checkpoint-keep", optarg, -1, 1000000);
            break;
        case OPT_PACE:
            o->pace_ms = parse_long_opt("pace", optarg, 0, 60000);
            break;
        case OPT_SLOW_RANK:
            o->slow_rank = parse_long_opt("slow-rank", optarg, 0, 1L << 20);
            break;
        case OPT_SLOW_PCT:
            o->slow_pct = parse_long_opt("slow-pct", optarg, 1, 1000);
            break;
        case OPT_SLOW_STEPS:
            o->slow_steps = parse_long_opt("slow-steps", optarg, 1, 100000000);
            break;
        case OPT_WARM:
            o->warm = 1;
            break;
        case OPT_CKPT_DIR:
            if (!*optarg)
                bad_option("checkpoint-dir", optarg, "a directory");
            o->ckpt_dir = optarg;
            break;
        case OPT_DEVICE:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                die(2, "--device: '%s' is not cpu or cuda", optarg);
            o->cuda = !strcmp(optarg, "cuda");
            break;
        case OPT_HIDDEN:
            parse_hidden(optarg, o);
            break;
        case OPT_COMM:
            o->comm = -1;
            for (int i = 0; i < 3; i++)
                if (!strcmp(optarg, comm_names[i]))
                    o->comm = i;
            if (o->comm < 0)
                die(2, "--comm: '%s' is not full, sfb or auto", optarg);
            break;
        case OPT_OVERLAP:
            o->overlap = (int)parse_long_opt("overlap", optarg, 0, 1);
            break;
        case OPT_HELP:
            usage(stdout);
            exit(0);
        case ':':
            die(2, "%s: missing value (see --help)", argv[optind - 1]);
        default:
            if (optopt > 0 && optopt < 256)
                die(2, "unknown option '-%c' (see --help)", optopt);
            die(2, "unknown or ambiguous option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die(2, "unexpected argument '%s': " PROG " takes options only (see --help)",
            argv[optind]);
    if ((o->slow_rank >= 0) != (o->slow_pct > 0))
        die(2, "--slow-rank and --slow-pct go together: --slow-rank R --slow-pct P");
    if (o->slow_steps && o->slow_rank < 0)
        die(2, "--slow-steps needs --slow-rank R --slow-pct P");
    if (o->ckpt_every && !o->ckpt_dir)
        die(2, "--checkpoint-every needs a directory: --checkpoint-dir DIR, or "
            "DDL_CHECKPOINT_DIR (ddlrun --checkpoint-dir sets it)");
    if (o->cuda && (o->nhidden != 1 || o->hidden[0] != N_HID || o->comm != COMM_FULL ||
                    o->overlap))
        die(2, "--device cuda trains only the default model, with --hidden %d --comm full "
            "--overlap 0", N_HID);
    if (o->warm && (o->cuda || o->comm != COMM_FULL || o->overlap))
        die(2, "--warm-restart: only on the CPU with --comm full --overlap 0 (drop --device "
            "cuda, --comm or --overlap 1)");
#ifndef FMNIST_CUDA
    if (o->cuda)
        die(EXIT_NO_GPU, "--device cuda: this program is built without CUDA: run "
            "fmnist-train-cuda, built next to it when configure finds nvcc and cuBLAS");
#endif
}

/* -------------------------------------------------------------------- data */

static void load_file(const char *dir, const char *name, idx_t *out)
{
    char path[4096], err[1024];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path)
        die(1, "--data: directory name too long (%zu bytes)", strlen(dir));
    if (idx_load(path, out, err, sizeof err) == 0)
        return;
    if (errno == ENOENT)
        die(1, "%s\n" PROG ": looked in %s; --data DIR or DDL_FMNIST_DIR choose another "
               "directory",
            err, dir);
    die(1, "%s", err);
}

/* load_split: images and labels of one split ("train" or "t10k"), checked
 * for the shapes the model expects. */
static void load_split(const char *dir, const char *split, dataset_t *d)
{
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", split);
    load_file(dir, name, &d->images);
    if (d->images.ndims != 3 || d->images.dims[1] != SIDE || d->images.dims[2] != SIDE)
        die(1, "%s/%s: expected images of %dx%d pixels, got dimensions %u x %u x %u", dir,
            name, SIDE, SIDE, d->images.dims[0], d->images.dims[1], d->images.dims[2]);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", split);
    load_file(dir, name, &d->labels);
    if (d->labels.ndims != 1 || d->labels.count != d->images.count)
        die(1, "%s/%s: expected %zu labels (one per image), got %zu in %d dimension(s)",
            dir, name, d->images.count, d->labels.count, d->labels.ndims);
    for (size_t i = 0; i < d->labels.count; i++)
        if (d->labels.data[i] >= N_OUT)
            die(1, "%s/%s: label %zu is %u, not a class 0..%d", dir, name, i,
                d->labels.data[i], N_OUT - 1);
}

/* ------------------------------------------------------------------ random */

/* splitmix64: a small, well-mixed generator; the whole state is one word. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* A generator for one purpose (stream) and one epoch, from the seed. */
static uint64_t rng_for(uint64_t seed, uint64_t stream, uint64_t epoch)
{
    uint64_t s = seed ^ (0xd1b54a32d192ed03u * (stream + 1));
    s = splitmix64(&s) ^ (0x8bb84b93962eacc9u * (epoch + 1));
    return splitmix64(&s);
}

/* Uniform in [0, n), without modulo bias. */
static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    uint64_t threshold = (0 - n) % n, r;
    do
        r = splitmix64(s);
    while (r < threshold);
    return r % n;
}

/* Standard normal by Box-Muller (one of the pair). */
static double rng_gauss(uint64_t *s)
{
    double u1 = (double)((splitmix64(s) >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(splitmix64(s) >> 11) * 0x1.0p-53;       /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* He initialisation: weights ~ N(0, 2 / fan_in), biases 0, layer after
 * layer from one stream. */
static void init_params(float *p, uint64_t seed)
{
    uint64_t s = rng_for(seed, 0, 0);
    memset(p, 0, N_PARAMS * sizeof *p);
    for (int l = 0; l < net.nl; l++) {
        double sd = sqrt(2.0 / net.dim[l]);
        for (size_t i = 0; i < (size_t)net.dim[l] * (size_t)net.dim[l + 1]; i++)
            p[net.off_w[l] + i] = (float)(sd * rng_gauss(&s));
    }
}

/* The epoch's order of the training samples: the same on every rank. */
static void shuffle(uint32_t *order, size_t n, uint64_t seed, long epoch)
{
    uint64_t s = rng_for(seed, 1, (uint64_t)epoch);
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)rng_below(&s, i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* ------------------------------------------------------------------- model */

static void work_init(work_t *w, size_t rows)
{
    w->rows = rows;
    w->x = xcalloc(rows * N_IN, sizeof *w->x);
    for (int l = 0; l + 1 < net.nl; l++) {
        w->h[l] = xcalloc(rows * (size_t)net.dim[l + 1], sizeof *w->h[l]);
        w->dh[l] = xcalloc(rows * (size_t)net.dim[l + 1], sizeof *w->dh[l]);
    }
    w->z = xcalloc(rows * N_OUT, sizeof *w->z);
}

static void work_free(work_t *w)
{
    free(w->x);
    for (int l = 0; l + 1 < net.nl; l++) {
        free(w->h[l]);
        free(w->dh[l]);
    }
    free(w->z);
}

/* gather: the m images at ids (or ids_base, ids_base+1... if ids is NULL)
 * into w->x, standardised. */
static void gather(const idx_t *images, const uint32_t *ids, size_t ids_base, size_t m,
                   work_t *w)
{
    float scale[256];
    for (int v = 0; v < 256; v++)
        scale[v] = ((float)v / 255.0f - PIXEL_MEAN) / PIXEL_STD;
    for (size_t r = 0; r < m; r++) {
        size_t id = ids ? ids[r] : ids_base + r;
        const uint8_t *src = images->data + id * N_IN;
        float *dst = w->x + r * N_IN;
        for (size_t j = 0; j < N_IN; j++)
            dst[j] = scale[src[j]];
    }
}

/* layer_in, layer_out: the m x dim[l] input of layer l, its m x dim[l+1]
 * output (activations; the logits for the last layer). */
static float *layer_in(work_t *w, int l)
{
    return l == 0 ? w->x : w->h[l - 1];
}

static float *layer_out(work_t *w, int l)
{
    return l == net.nl - 1 ? w->z : w->h[l];
}

/* forward: logits of the m rows of w->x into w->z, keeping the hidden
 * activations. */
static void forward(const float *p, work_t *w, int m)
{
    for (int l = 0; l < net.nl; l++) {
        const int in = net.dim[l], out = net.dim[l + 1];
        float *y = layer_out(w, l);
        const float *b = p + net.off_b[l];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, out, in, 1.0f,
                    layer_in(w, l), in, p + net.off_w[l], out, 0.0f, y, out);
        if (l == net.nl - 1) {
            for (int r = 0; r < m; r++)
                for (int k = 0; k < out; k++)
                    y[(size_t)r * out + k] += b[k];
        } else {
            for (int r = 0; r < m; r++) {
                float *h = y + (size_t)r * out;
                for (int j = 0; j < out; j++) {
                    float v = h[j] + b[j];
                    h[j] = v > 0.0f ? v : 0.0f;
                }
            }
        }
    }
}

static int argmax(const float *z)
{
    int best = 0;
    for (int k = 1; k < N_OUT; k++)
        if (z[k] > z[best])
            best = k;
    return best;
}

/* softmax_xent: add the cross-entropy of each row to *loss and its hits to
 * *correct, and replace the logits by the gradient of the loss with respect
 * to them, scaled by scale: (softmax - onehot) * scale. */
static void softmax_xent(float *z, const uint8_t *labels, const uint32_t *ids, int m,
                         float scale, double *loss, double *correct)
{
    for (int r = 0; r < m; r++) {
        float *zr = z + (size_t)r * N_OUT;
        int y = labels[ids[r]];
        int best = argmax(zr);
        float max = zr[best];
        double sum = 0.0;
        float e[N_OUT];
        for (int k = 0; k < N_OUT; k++) {
            e[k] = expf(zr[k] - max);
            sum += e[k];
        }
        *loss += log(sum) - (double)(zr[y] - max);
        *correct += best == y;
        float inv = (float)(1.0 / sum);
        for (int k = 0; k < N_OUT; k++)
            zr[k] = (e[k] * inv - (k == y ? 1.0f : 0.0f)) * scale;
    }
}

/* The gradient exchange of --overlap 1 or --comm sfb|auto (NULL: one
 * allreduce of the whole gradient after backward): layer l's weights are
 * exchange layer 2l (fully connected, dim[l] x dim[l+1]), its biases 2l+1,
 * registered in forward order, which is their priority. */
typedef struct {
    ddl_gradx_t *gx;
    int overlap; /* push during backward (1) or after it (0) */
} xchg_t;

/* backward_layer: layer l's gradient (its output gradient in delta) into g,
 * or its factors to the exchange; with overlap, handed over at once. */
static void backward_layer(const float *p, float *g, work_t *w, int m, int l, const float *delta,
                           xchg_t *xc)
{
    (void)p;
    const int in = net.dim[l], out = net.dim[l + 1];
    const float *x = layer_in(w, l);
    float *gw = g + net.off_w[l], *gb = g + net.off_b[l];
    int factors = xc && ddl_gradx_layer_sfb(xc->gx, 2 * l) == 1;
    /* dW = X^T dY, db = column sums of dY */
    if (factors) {
        if (xc->overlap)
            check(ddl_gradx_push_factors(xc->gx, 2 * l, x, delta, m, gw), "ddl_gradx_push_factors");
    } else {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, m, 1.0f, x, in, delta,
                    out, 0.0f, gw, out);
        if (xc && xc->overlap)
            check(ddl_gradx_push(xc->gx, 2 * l, gw), "ddl_gradx_push");
    }
    for (int k = 0; k < out; k++)
        gb[k] = 0.0f;
    for (int r = 0; r < m; r++)
        for (int k = 0; k < out; k++)
            gb[k] += delta[(size_t)r * out + k];
    if (xc && xc->overlap)
        check(ddl_gradx_push(xc->gx, 2 * l + 1, gb), "ddl_gradx_push");
}

/* backward: the gradient of the m rows, given w->z holding the logits'
 * gradient, into g (overwritten), last layer first; with an exchange,
 * every layer handed over (without overlap: after the whole pass). */
static void backward(const float *p, float *g, work_t *w, int m, xchg_t *xc)
{
    for (int l = net.nl - 1; l >= 0; l--) {
        const float *delta = l == net.nl - 1 ? w->z : w->dh[l];
        backward_layer(p, g, w, m, l, delta, xc);
        if (l == 0)
            break;
        /* dH = dY W^T, through the ReLU (h > 0 exactly where it passed) */
        const int in = net.dim[l], out = net.dim[l + 1];
        float *dh = w->dh[l - 1];
        const float *h = w->h[l - 1];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, in, out, 1.0f, delta, out,
                    p + net.off_w[l], out, 0.0f, dh, in);
        for (size_t i = 0; i < (size_t)m * (size_t)in; i++)
            if (h[i] <= 0.0f)
                dh[i] = 0.0f;
    }
    if (xc && !xc->overlap) /* hand everything over now, last layer first */
        for (int l = net.nl - 1; l >= 0; l--) {
            if (ddl_gradx_layer_sfb(xc->gx, 2 * l) == 1)
                check(ddl_gradx_push_factors(xc->gx, 2 * l, layer_in(w, l),
                                             l == net.nl - 1 ? w->z : w->dh[l], m,
                                             g + net.off_w[l]),
                      "ddl_gradx_push_factors");
            else
                check(ddl_gradx_push(xc->gx, 2 * l, g + net.off_w[l]), "ddl_gradx_push");
            check(ddl_gradx_push(xc->gx, 2 * l + 1, g + net.off_b[l]), "ddl_gradx_push");
        }
}

/* evaluate: correct predictions on test samples [lo, hi). */
static double evaluate(const float *p, const dataset_t *test, size_t lo, size_t hi,
                       work_t *w)
{
    double correct = 0.0;
    for (size_t start = lo; start < hi; start += w->rows) {
        size_t m = hi - start < w->rows ? hi - start : w->rows;
        gather(&test->images, NULL, start, m, w);
        forward(p, w, (int)m);
        for (size_t r = 0; r < m; r++)
            correct += argmax(w->z + r * N_OUT) == test->labels.data[start + r];
    }
    return correct;
}

/* ckpt_failed: rank 0 says a checkpoint was not committed; training goes
 * on from the state in memory, and the previous checkpoint stays latest. */
static void ckpt_failed(const char *what, int64_t step, ddl_status_t st)
{
    if (ddl_rank() == 0)
        say("fmnist-train: %s %lld not committed (%s: %s); training goes on\n", what,
            (long long)step, ddl_status_str(st), ddl_last_error());
}

/* save_checkpoint: commit checkpoint `iter` (collective): everything a
 * resumed run needs to continue bit for bit.  A failed checkpoint (I/O
 * error, full disk) leaves the previous one; training goes on.  In async
 * mode a failure of the previous background write surfaces at this begin
 * (the step it names is the previous one), and this one is then started
 * again. */
static ddl_status_t save_checkpoint(ddl_comm_t *comm, const char *dir, int64_t iter, int async,
                                    const float *params, const float *velocity,
                                    const double *stats, const int32_t *modes, int nmodes)
{
    ddl_ckpt_t *ck;
    unsigned flags = async ? DDL_CKPT_ASYNC : 0;
    ddl_status_t st = ddl_ckpt_begin(comm, dir, iter, ckpt_keep, flags, &ck);
    if (st == DDL_ERR_IO && async) {
        ckpt_failed("the previous async checkpoint before", iter, st);
        st = ddl_ckpt_begin(comm, dir, iter, ckpt_keep, flags, &ck);
    }
    if (st != DDL_OK) {
        ckpt_failed("checkpoint", iter, st);
        return st;
    }
    ddl_ckpt_write(ck, "params", params, N_PARAMS * sizeof *params);
    ddl_ckpt_write(ck, "velocity", velocity, N_PARAMS * sizeof *velocity);
    ddl_ckpt_write(ck, "stats", stats, 3 * sizeof *stats);
    if (modes) /* the exchange's decisions, kept on resume (bit for bit) */
        ddl_ckpt_write(ck, "comm-modes", modes, (size_t)nmodes * sizeof *modes);
    if ((st = ddl_ckpt_commit(ck)) != DDL_OK)
        ckpt_failed("checkpoint", iter, st);
    return st;
}

/* ---------------------------------------------------------------- exchange */

/* exchange_create: register the layers with libddl's gradient exchange, in
 * forward order: layer l's weights as a fully connected layer of at most
 * max_batch samples per rank, travelling as --comm says (or as modes[l],
 * the decision a resumed checkpoint recorded), its biases as a plain one. */
static void exchange_create(xchg_t *xc, ddl_comm_t *comm, const options_t *o, int max_batch,
                            int32_t *modes)
{
    static const ddl_gradx_mode_t by_comm[] = {DDL_GRADX_FULL, DDL_GRADX_SFB, DDL_GRADX_AUTO};
    check(ddl_gradx_create(comm, DDL_SUM, &xc->gx), "ddl_gradx_create");
    for (int l = 0; l < net.nl; l++) {
        ddl_gradx_mode_t mode = modes[l] ? (ddl_gradx_mode_t)modes[l] : by_comm[o->comm];
        check(ddl_gradx_add_fc(xc->gx, net.dim[l], net.dim[l + 1], max_batch, mode, NULL),
              "ddl_gradx_add_fc");
        check(ddl_gradx_add_layer(xc->gx, (size_t)net.dim[l + 1], NULL), "ddl_gradx_add_layer");
    }
    check(ddl_gradx_commit(xc->gx), "ddl_gradx_commit");
    for (int l = 0; l < net.nl; l++)
        modes[l] = ddl_gradx_layer_sfb(xc->gx, 2 * l) == 1 ? DDL_GRADX_SFB : DDL_GRADX_FULL;
}

/* exchange_describe: rank 0's line on how each layer's gradient travels. */
static void exchange_describe(const xchg_t *xc, const options_t *o)
{
    char buf[512];
    size_t n = 0;
    for (int l = 0; l < net.nl && n < sizeof buf; l++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%sW%d %s", l ? ", " : "", l + 1,
                              ddl_gradx_layer_sfb(xc->gx, 2 * l) == 1 ? "factors" : "matrix");
    say("fmnist-train: gradient exchange (--comm %s --overlap %d): %s\n", comm_names[o->comm],
        xc->overlap, buf);
}

/* exchange_update: layer by layer in forward order, wait for the layer's
 * summed gradient and apply the update to it (the same arithmetic as the
 * update of the whole buffer). */
static void exchange_update(xchg_t *xc, float *params, float *velocity, const float *grads,
                            float lr, float mu)
{
    for (int l = 0; l < net.nl; l++)
        for (int part = 0; part < 2; part++) {
            check(ddl_gradx_wait(xc->gx, 2 * l + part), "ddl_gradx_wait");
            size_t lo = part ? net.off_b[l] : net.off_w[l];
            size_t hi = part ? net.off_b[l] + (size_t)net.dim[l + 1] : net.off_b[l];
            for (size_t i = lo; i < hi; i++) {
                velocity[i] = mu * velocity[i] + grads[i];
                params[i] -= lr * velocity[i];
            }
        }
}

/* exchange_report: collective; rank 0 prints the bytes each rank sent per
 * iteration for the gradient (averaged over the ranks: measured by the
 * exchange, or the ring's 2 (p-1)/p of the buffer for the blocking
 * allreduce) and the share of communication hidden behind computation
 * (1 - time blocked waiting / time the collectives ran).  Frees the
 * exchange. */
static void exchange_report(xchg_t *xc, ddl_comm_t *comm, long steps, double comm_s)
{
    const int p = ddl_comm_size(comm);
    double v[4] = {0, 0, 0, 0}; /* bytes per step, hidden share, comm ms, exposed ms */
    const char *how;
    if (steps < 1)
        steps = 1;
    if (xc->gx) {
        ddl_gradx_stats_t st;
        check(ddl_gradx_stats(xc->gx, &st), "ddl_gradx_stats");
        double exposed = st.exposed_us - st.rebuild_us; /* the rebuild is computation */
        v[0] = (double)st.bytes_sent / (double)steps;
        v[1] = st.comm_us > 0 ? fmax(0.0, 1.0 - exposed / st.comm_us) : 0.0;
        v[2] = st.comm_us / 1e3 / (double)steps;
        v[3] = exposed / 1e3 / (double)steps;
        how = "measured";
        if (ddl_rank() == 0)
            say("exchange model: %.0f bytes per iteration per rank\n", (double)st.model_bytes);
        ddl_gradx_free(xc->gx);
        xc->gx = NULL;
    } else {
        v[0] = 2.0 * (p - 1) / p * 4.0 * (double)N_PARAMS;
        v[1] = 0.0;
        v[2] = v[3] = comm_s * 1e3 / (double)steps;
        how = "ring model";
    }
    check(ddl_allreduce(comm, DDL_IN_PLACE, v, 4, DDL_FLOAT64, DDL_AVG), "ddl_allreduce");
    if (ddl_rank() == 0)
        say("exchange: %.0f bytes sent per iteration per rank (%s), %.1f%% of communication "
            "hidden (%.2f ms per iteration communicating, %.2f ms waited for)\n",
            v[0], how, 100.0 * v[1], v[2], v[3]);
}

/* ------------------------------------------------------------------ device */

/* --device cuda: the model on this rank's GPU (fmnist_cuda.cu).  Every
 * helper stops the program on a CUDA failure.  Built without CUDA,
 * parse_options() refuses --device cuda, so gpu stays NULL and the empty
 * versions below never run. */
#ifdef FMNIST_CUDA

static char gpu_desc[320]; /* "GPU d of n (name)", for rank 0's summary */

static void gpu_check(int rc, const char *what)
{
    if (rc != 0)
        die(1, "--device cuda: %s: %s", what, fmnist_cuda_error());
}

/* local_rank_env: this rank's index on its node before ddl_init():
 * DDL_LOCAL_RANK (ddlrun and ddl-launch set it), else LOCAL_RANK, else 0. */
static int local_rank_env(void)
{
    static const char *const names[] = {"DDL_LOCAL_RANK", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *s = getenv(names[i]);
        char *end;
        if (!s || !*s)
            continue;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && errno == 0 && v >= 0 && v <= 1000000)
            return (int)v;
    }
    return 0;
}

/* gpu_select: before ddl_init(), which takes the current device as this
 * rank's: device local_rank % devices (under ddlrun and srun --ddl each
 * rank usually sees only its own GPU).  No GPU: exit 77. */
static void gpu_select(void)
{
    int dev = -1, ndev = 0;
    char name[256] = "";
    int rc = fmnist_cuda_select(local_rank_env(), &dev, &ndev, name, sizeof name);
    if (rc == 1)
        die(EXIT_NO_GPU, "--device cuda: no usable GPU (%s)", fmnist_cuda_error());
    gpu_check(rc, "selecting the GPU");
    snprintf(gpu_desc, sizeof gpu_desc, "GPU %d of %d (%s)", dev, ndev, name);
}

/* gpu_create: after ddl_init() and loading the data: both data sets, and
 * the parameters and momentum from the host, on the device. */
static fmnist_gpu_t *gpu_create(const dataset_t *train, const dataset_t *test, size_t rows,
                                const float *params, const float *velocity)
{
    fmnist_gpu_t *gpu = fmnist_gpu_create(N_IN, N_HID, N_OUT, rows, train->images.data,
                                          train->labels.data, train->images.count,
                                          test->images.data, test->labels.data,
                                          test->images.count, PIXEL_MEAN, PIXEL_STD);
    if (!gpu)
        die(1, "--device cuda: %s", fmnist_cuda_error());
    gpu_check(fmnist_gpu_put_state(gpu, params, velocity), "copying the weights to the GPU");
    return gpu;
}

static void gpu_summary(fmnist_gpu_t *gpu)
{
    int v = fmnist_gpu_cublas_version(gpu);
    say("fmnist-train: device cuda: rank 0 on %s, cuBLAS %d.%d.%d\n", gpu_desc, v / 10000,
        v / 100 % 100, v % 100);
}

/* gpu_epoch_start: the epoch's order and the statistics so far. */
static void gpu_epoch_start(fmnist_gpu_t *gpu, const uint32_t *order, size_t n,
                            const double *stats)
{
    gpu_check(fmnist_gpu_set_order(gpu, order, n), "copying the order to the GPU");
    gpu_check(fmnist_gpu_put_stats(gpu, stats), "copying the statistics to the GPU");
}

/* gpu_shard_grad: this rank's shard [lo, lo+m) of a batch of bs samples;
 * returns the device buffer of its gradient, for the allreduce. */
static float *gpu_shard_grad(fmnist_gpu_t *gpu, size_t lo, int m, size_t bs)
{
    gpu_check(fmnist_gpu_shard_grad(gpu, lo, m, 1.0f / (float)bs), "gradient");
    return fmnist_gpu_grads(gpu);
}

static void gpu_update(fmnist_gpu_t *gpu, float lr, float mu)
{
    gpu_check(fmnist_gpu_update(gpu, lr, mu), "update");
}

/* gpu_fetch: parameters, momentum and the epoch's training statistics
 * (each may be NULL) to the host, for a checkpoint, the CRC or the epoch's
 * line. */
static void gpu_fetch(fmnist_gpu_t *gpu, float *params, float *velocity, double *stats)
{
    gpu_check(fmnist_gpu_get_state(gpu, params, velocity), "copying the weights from the GPU");
    if (stats)
        gpu_check(fmnist_gpu_get_stats(gpu, stats), "copying the statistics from the GPU");
}

static void gpu_sync(fmnist_gpu_t *gpu)
{
    gpu_check(fmnist_gpu_sync(gpu), "training step");
}

static double gpu_evaluate(fmnist_gpu_t *gpu, size_t lo, size_t hi)
{
    double correct = 0.0;
    gpu_check(fmnist_gpu_evaluate(gpu, lo, hi, &correct), "evaluation");
    return correct;
}

static void gpu_free(fmnist_gpu_t *gpu)
{
    fmnist_gpu_destroy(gpu);
}

#else /* !FMNIST_CUDA */

typedef struct fmnist_gpu fmnist_gpu_t;
static void gpu_select(void) {}
static fmnist_gpu_t *gpu_create(const dataset_t *train, const dataset_t *test, size_t rows,
                                const float *params, const float *velocity)
{
    return NULL;
}
static void gpu_summary(fmnist_gpu_t *gpu) {}
static void gpu_epoch_start(fmnist_gpu_t *gpu, const uint32_t *order, size_t n,
                            const double *stats) {}
static float *gpu_shard_grad(fmnist_gpu_t *gpu, size_t lo, int m, size_t bs)
{
    return NULL;
}
static void gpu_update(fmnist_gpu_t *gpu, float lr, float mu) {}
static void gpu_fetch(fmnist_gpu_t *gpu, float *params, float *velocity, double *stats) {}
static void gpu_sync(fmnist_gpu_t *gpu) {}
static double gpu_evaluate(fmnist_gpu_t *gpu, size_t lo, size_t hi)
{
    return 0.0;
}
static void gpu_free(fmnist_gpu_t *gpu) {}

#endif /* FMNIST_CUDA */

/* stop_here: the job is being stopped and every rank is at step `iter`:
 * commit the checkpoint of this step (synchronously; unless the periodic one
 * just did), then exit with DDL_EXIT_STOPPED, so that the batch script
 * requeues the job and it resumes from here. */
static void stop_here(ddl_comm_t *comm, const options_t *o, fmnist_gpu_t *gpu, int64_t iter,
                      int saved, float *params, float *velocity, double *stats,
                      const int32_t *modes, int nmodes)
{
    int64_t last = -1;
    if (o->ckpt_dir && o->ckpt_async) /* the periodic one may still be in the background */
        check(ddl_ckpt_wait(&last), "ddl_ckpt_wait");
    if (o->ckpt_dir && !(saved && (!o->ckpt_async || last == iter))) {
        if (gpu)
            gpu_fetch(gpu, params, velocity, stats);
        save_checkpoint(comm, o->ckpt_dir, iter, 0, params, velocity, stats, modes, nmodes);
    }
    int64_t latest = -1;
    if (o->ckpt_dir)
        ddl_ckpt_latest(o->ckpt_dir, &latest);
    if (ddl_rank() == 0) {
        if (latest == iter)
            say("fmnist-train: stopped at step %lld: checkpoint committed in %s; exit status "
                "%d (requeue to resume)\n", (long long)iter, o->ckpt_dir, DDL_EXIT_STOPPED);
        else
            say("fmnist-train: stopped at step %lld without a checkpoint of it (%s); exit "
                "status %d\n", (long long)iter,
                o->ckpt_dir ? "it was not committed" : "no --checkpoint-dir", DDL_EXIT_STOPPED);
    }
    check(ddl_finalize(), "ddl_finalize");
    exit(DDL_EXIT_STOPPED);
}

/* -------------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    options_t opt;
    parse_options(argc, argv, &opt);
    openblas_set_num_threads(1); /* one BLAS thread per rank */
    if (opt.cuda)
        gpu_select(); /* before ddl_init(): libddl takes the current device */

    check(ddl_init(), "ddl_init");
    ddl_comm_t *comm = ddl_comm_world();
    if (!comm)
        die(1, "ddl_comm_world failed: no world communicator after ddl_init");
    int rank = ddl_rank(), size = ddl_size();
    /* --warm-restart: after a failure elsewhere this process stays; the last
     * committed checkpoint is kept in memory for it */
    int warm = 0, resumed = 0;
    if (opt.warm) {
        ddl_status_t ws = ddl_warm_enable();
        warm = ws == DDL_OK;
        if (!warm && rank == 0)
            say("fmnist-train: --warm-restart: %s: %s; restarts stay cold\n",
                ddl_status_str(ws), ddl_last_error());
    }
/* CALL: a libddl call in the training: DDL_RESTART (warm) goes to rejoin */
#define CALL(expr, what)                                                                  \
    do {                                                                                  \
        ddl_status_t st_ = (expr);                                                        \
        if (st_ == DDL_RESTART && warm)                                                   \
            goto rejoin;                                                                  \
        check(st_, what);                                                                 \
    } while (0)
    if (opt.cuda && ddl_gpu_count() <= 0) /* libddl built without CUDA, or lost it */
        die(EXIT_NO_GPU, "--device cuda: no usable GPU (libddl sees 0 CUDA devices)");

    dataset_t train, test;
    load_split(opt.data_dir, "train", &train);
    load_split(opt.data_dir, "t10k", &test);
    size_t ntrain = train.images.count, ntest = test.images.count;
    if (opt.limit > 0) {
        if ((size_t)opt.limit < ntrain)
            ntrain = (size_t)opt.limit;
        if ((size_t)opt.limit < ntest)
            ntest = (size_t)opt.limit;
    }
    size_t batch = (size_t)opt.batch;
    net_init(opt.hidden, opt.nhidden);

    float *params = xcalloc(N_PARAMS, sizeof *params);
    float *grads = xcalloc(N_PARAMS, sizeof *grads);
    float *velocity = xcalloc(N_PARAMS, sizeof *velocity);
    uint32_t *order = xcalloc(train.images.count, sizeof *order);
    size_t shard_max = (batch + (size_t)size - 1) / (size_t)size;
    size_t rows = shard_max > EVAL_ROWS ? shard_max : EVAL_ROWS;
    work_t w = {0}; /* the CPU's scratch; --device cuda has its own */
    if (!opt.cuda)
        work_init(&w, rows);

    /* [0] loss sum, [1] correct on training shards, [2] correct on test */
    double stats[3] = {0.0, 0.0, 0.0};
    const size_t nbatches = (ntrain + batch - 1) / batch;
    int64_t iter = 0; /* iterations done: the checkpoint step */
    int32_t modes[MAX_HIDDEN + 1] = {0}; /* per layer: DDL_GRADX_*, 0: --comm decides */
    /* --warm-restart: the last committed checkpoint, as this rank wrote it,
     * and the one being committed (a peer lost inside its commit can leave
     * it latest, rank 0 having published it, while this rank's save failed) */
    struct mem_copy mem[2] = {{.iter = -1}, {.iter = -1}};
    for (int i = 0; warm && i < 2; i++) {
        mem[i].params = xcalloc(N_PARAMS, sizeof *params);
        mem[i].velocity = xcalloc(N_PARAMS, sizeof *velocity);
    }
    const struct mem_copy *kept = NULL;
    char from[PATH_MAX]; /* where this rank's shard is: the checkpoint level's directory */
    int level = DDL_CKPT_LEVEL_SHARED;
    const int levels = opt.ckpt_dir && getenv("DDL_CKPT_LOCAL_DIR") && *getenv("DDL_CKPT_LOCAL_DIR");
resume:
    if (resumed) { /* a warm restart: the state of a fresh start, then the checkpoint's */
        memset(velocity, 0, N_PARAMS * sizeof *velocity);
        memset(stats, 0, sizeof stats);
        memset(modes, 0, sizeof modes);
        iter = 0;
    }
    if (levels) {
        /* the node-local level: this node, a partner's copy, or the shared directory */
        ddl_status_t st = ddl_ckpt_restore(comm, opt.ckpt_dir, &iter, from, sizeof from, &level);
        if (st == DDL_ERR_IO)
            die(DDL_EXIT_NO_CHECKPOINT, "ddl_ckpt_restore failed: %s: exit status %d (no "
                "restart)", ddl_last_error(), DDL_EXIT_NO_CHECKPOINT);
        CALL(st, "ddl_ckpt_restore");
        if (iter < 0)
            iter = 0;
    } else if (opt.ckpt_dir) {
        check(ddl_ckpt_latest(opt.ckpt_dir, &iter), "ddl_ckpt_latest");
        snprintf(from, sizeof from, "%s", opt.ckpt_dir);
        if (iter < 0)
            iter = 0;
    }
    kept = NULL;
    for (int i = 0; i < 2; i++) {
        if (!kept && resumed && iter > 0 && mem[i].iter == iter && mem[i].rank == rank &&
            mem[i].size == size)
            kept = &mem[i];
        else
            mem[i].iter = -1; /* another step, or one the world goes back behind */
    }
    if (kept) {
        /* a warm restart: the committed checkpoint is one this rank kept */
        memcpy(params, kept->params, N_PARAMS * sizeof *params);
        memcpy(velocity, kept->velocity, N_PARAMS * sizeof *velocity);
        memcpy(stats, kept->stats, sizeof stats);
        say("rank %d: warm restart %d: rank %d of %d, from checkpoint step %lld in memory\n",
            rank, resumed, rank, size, (long long)iter);
    } else if (iter > 0) {
        /* every rank reads its own shard: the same weights and momentum,
         * its own partial statistics of the epoch.  A rank the world grew
         * by since the checkpoint has no shard: it takes rank 0's weights
         * and momentum (the same on every rank) and starts its statistics
         * of the epoch at zero */
        int shard = rank;
        size_t have = 0;
        if (ddl_ckpt_read(from, iter, rank, "params", NULL, 0, &have) == DDL_ERR_INVALID &&
            rank > 0 && ddl_ckpt_read(from, iter, 0, "params", NULL, 0, &have) == DDL_OK) {
            shard = 0;
            say("rank %d: checkpoint step %lld has no shard of rank %d (the world grew since): "
                "rank 0's weights\n", rank, (long long)iter, rank);
        }
        if (resumed)
            say("rank %d: warm restart %d: rank %d of %d, from checkpoint step %lld on disk\n",
                rank, resumed, rank, size, (long long)iter);
        check(ddl_ckpt_read(from, iter, shard, "params", params,
                            N_PARAMS * sizeof *params, NULL), "ddl_ckpt_read params");
        check(ddl_ckpt_read(from, iter, shard, "velocity", velocity,
                            N_PARAMS * sizeof *velocity, NULL), "ddl_ckpt_read velocity");
        if (shard == rank)
            check(ddl_ckpt_read(from, iter, rank, "stats", stats, sizeof stats, NULL),
                  "ddl_ckpt_read stats");
        static const char *const lname[] = {"none", "node-local", "partner copy", "shared"};
        if (levels)
            say("rank %d: restoring step %lld from %s (%s)\n", rank, (long long)iter, from,
                lname[level & 3]);
        size_t got = 0; /* absent from runs without the exchange */
        if (ddl_ckpt_read(from, iter, shard, "comm-modes", modes, sizeof modes, &got) !=
                DDL_OK ||
            got != (size_t)net.nl * sizeof *modes)
            memset(modes, 0, sizeof modes);
        if (rank == 0)
            say("fmnist-train: resuming from checkpoint step %lld (epoch %lld, batch %lld) "
                "in %s, restart %s\n", (long long)iter, (long long)(iter / (int64_t)nbatches) + 1,
                (long long)(iter % (int64_t)nbatches), opt.ckpt_dir,
                getenv("DDL_RESTART_COUNT") ? getenv("DDL_RESTART_COUNT") : "0");
    } else {
        if (resumed)
            say("rank %d: warm restart %d: rank %d of %d, from the start (no checkpoint)\n",
                rank, resumed, rank, size);
        if (rank == 0)
            init_params(params, opt.seed);
        CALL(ddl_bcast(comm, params, N_PARAMS, DDL_FLOAT32, 0), "ddl_bcast");
    }
    /* --device cuda: the model lives on the GPU from here on; the host
     * copies of params and velocity are refreshed for checkpoints and the
     * final CRC */
    fmnist_gpu_t *gpu = opt.cuda ? gpu_create(&train, &test, rows, params, velocity) : NULL;
    xchg_t xc = {NULL, opt.overlap};
    if (opt.overlap || opt.comm != COMM_FULL)
        exchange_create(&xc, comm, &opt, (int)shard_max, modes);

    if (rank == 0 && !resumed) {
        char shape[MAX_HIDDEN * 8 + 16];
        size_t o = 0;
        for (int l = 0; l <= net.nl; l++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%d", l ? "-" : "", net.dim[l]);
        say("fmnist-train: %d rank%s, MLP %s (%zu parameters), batch %zu, lr %g, "
            "momentum %g, seed %llu, %zu training / %zu test samples\n",
            size, size == 1 ? "" : "s", shape, N_PARAMS, batch, opt.lr,
            opt.momentum, (unsigned long long)opt.seed, ntrain, ntest);
        if (xc.gx)
            exchange_describe(&xc, &opt);
    }
    if (rank == 0 && gpu)
        gpu_summary(gpu);

    const float lr = (float)opt.lr, mu = (float)opt.momentum;
    double test_acc = 0.0;
    double comm_s = 0; /* --overlap 0 --comm full: time in the blocking allreduce */
    long steps_run = 0;
    double slow_s = 0; /* --slow-rank: the sleep before the next step */
    for (long epoch = (long)(iter / (int64_t)nbatches); epoch < opt.epochs; epoch++) {
        CALL(ddl_barrier(comm), "ddl_barrier");
        double t0 = now_s();
        shuffle(order, train.images.count, opt.seed, epoch);

        size_t first = (size_t)(iter - (int64_t)epoch * (int64_t)nbatches) * batch;
        if (first == 0)
            stats[0] = stats[1] = stats[2] = 0.0;
        if (gpu)
            gpu_epoch_start(gpu, order, train.images.count, stats);
        for (size_t start = first; start < ntrain; start += batch) {
            if (rank == opt.slow_rank && slow_s > 0 &&
                (!opt.slow_steps || steps_run < opt.slow_steps)) { /* --slow-rank: a straggler */
                time_t whole = (time_t)slow_s;
                struct timespec d = {whole, (long)((slow_s - (double)whole) * 1e9)};
                nanosleep(&d, NULL);
            }
            double tstep = now_s();
            size_t bs = ntrain - start < batch ? ntrain - start : batch;
            size_t lo = start + (size_t)rank * bs / (size_t)size;
            size_t hi = start + ((size_t)rank + 1) * bs / (size_t)size;
            int m = (int)(hi - lo);
            float *gbuf = grads; /* the gradient to allreduce: host or device */
            if (gpu) {
                gbuf = gpu_shard_grad(gpu, lo, m, bs);
            } else if (m > 0) {
                gather(&train.images, order + lo, 0, (size_t)m, &w);
                forward(params, &w, m);
                softmax_xent(w.z, train.labels.data, order + lo, m, 1.0f / (float)bs,
                             &stats[0], &stats[1]);
                backward(params, grads, &w, m, xc.gx ? &xc : NULL);
            } else {
                memset(grads, 0, N_PARAMS * sizeof *grads);
                if (xc.gx)
                    backward(params, grads, &w, 0, &xc); /* no sample: zero factors */
            }
            /* this step's compute (with --pace's sleep), for --slow-pct */
            slow_s = (now_s() - tstep + (double)opt.pace_ms / 1000.0) * (double)opt.slow_pct /
                     100.0;
            if (xc.gx) {
                /* the exchange: each layer's update waits for its own gradient */
                exchange_update(&xc, params, velocity, grads, lr, mu);
            } else {
                /* on the device buffer, libddl orders the allreduce after the
                 * work queued on the default stream, and the update after it */
                double tc = now_s();
                CALL(ddl_allreduce(comm, DDL_IN_PLACE, gbuf, N_PARAMS, DDL_FLOAT32, DDL_SUM),
                     "ddl_allreduce");
                comm_s += now_s() - tc;
                if (gpu) {
                    gpu_update(gpu, lr, mu);
                } else {
                    for (size_t i = 0; i < N_PARAMS; i++) {
                        velocity[i] = mu * velocity[i] + grads[i];
                        params[i] -= lr * velocity[i];
                    }
                }
            }
            steps_run++;
            iter++;
            ddl_heartbeat(iter); /* the step, for the agents' metrics and hang reports */
            int saved = 0;
            if (opt.ckpt_every && iter % opt.ckpt_every == 0) {
                if (gpu)
                    gpu_fetch(gpu, params, velocity, stats);
                /* kept for a warm restart, in the older of the two copies: used
                 * only if it is the step latest names (an async one may be
                 * dropped in an abort: the one before is then read from disk) */
                struct mem_copy *mc = warm ? &mem[mem[1].iter < mem[0].iter] : NULL;
                if (mc) {
                    memcpy(mc->params, params, N_PARAMS * sizeof *params);
                    memcpy(mc->velocity, velocity, N_PARAMS * sizeof *velocity);
                    memcpy(mc->stats, stats, sizeof stats);
                    mc->iter = iter;
                    mc->rank = rank;
                    mc->size = size;
                }
                save_checkpoint(comm, opt.ckpt_dir, iter, opt.ckpt_async, params, velocity,
                                stats, xc.gx ? modes : NULL, net.nl);
                saved = 1;
            }
            if (opt.pace_ms > 0) {
                struct timespec pace = {opt.pace_ms / 1000, (opt.pace_ms % 1000) * 1000000L};
                nanosleep(&pace, NULL);
            }
            /* The job is being stopped (time limit, preemption, ddlrun's SIGTERM):
             * every rank gets DDL_STOP at the same step; commit it and exit. */
            ddl_status_t sst = ddl_should_stop(iter);
            if (sst == DDL_RESTART && warm)
                goto rejoin;
            if (sst == DDL_STOP)
                stop_here(comm, &opt, gpu, iter, saved, params, velocity, stats,
                          xc.gx ? modes : NULL, net.nl);
            check(sst, "ddl_should_stop");
        }
        if (gpu)
            gpu_sync(gpu); /* the epoch's time includes the last update */
        double elapsed = now_s() - t0;

        size_t tlo = (size_t)rank * ntest / (size_t)size;
        size_t thi = ((size_t)rank + 1) * ntest / (size_t)size;
        if (gpu) {
            gpu_fetch(gpu, NULL, NULL, stats);
            stats[2] = gpu_evaluate(gpu, tlo, thi);
        } else {
            stats[2] = evaluate(params, &test, tlo, thi, &w);
        }
        CALL(ddl_allreduce(comm, DDL_IN_PLACE, stats, 3, DDL_FLOAT64, DDL_SUM), "ddl_allreduce");
        test_acc = 100.0 * stats[2] / (double)ntest;
        if (rank == 0)
            say("epoch %ld/%ld  loss %.4f  train-acc %.2f%%  test-acc %.2f%%  "
                "%.0f samples/s  (%.1f s)\n",
                epoch + 1, opt.epochs, stats[0] / (double)ntrain,
                100.0 * stats[1] / (double)ntrain, test_acc, (double)ntrain / elapsed,
                elapsed);
    }

    /* Every replica must hold the same bits. */
    if (gpu)
        gpu_fetch(gpu, params, NULL, NULL);
    uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)params,
                                   (uInt)(N_PARAMS * sizeof *params));
    say("rank %d: weights crc32 0x%08x\n", rank, crc);
    int64_t crc0 = crc;
    CALL(ddl_bcast(comm, &crc0, 1, DDL_INT64, 0), "ddl_bcast");
    double differ = (int64_t)crc != crc0 ? 1.0 : 0.0;
    CALL(ddl_allreduce(comm, DDL_IN_PLACE, &differ, 1, DDL_FLOAT64, DDL_SUM), "ddl_allreduce");
    long ndiffer = lround(differ);
    if (rank == 0) {
        if (ndiffer == 0)
            say("checksums: all %d ranks agree (0x%08x)\n", size, crc);
        else
            say("checksums: %ld of %d ranks differ\n", ndiffer, size);
        say("final test accuracy: %.2f%%\n", test_acc);
    }
    exchange_report(&xc, comm, steps_run, comm_s);

    gpu_free(gpu);
    work_free(&w);
    for (int i = 0; i < 2; i++) {
        free(mem[i].params);
        free(mem[i].velocity);
    }
    free(order);
    free(velocity);
    free(grads);
    free(params);
    idx_free(&train.images);
    idx_free(&train.labels);
    idx_free(&test.images);
    idx_free(&test.labels);
    if (opt.ckpt_async) { /* the last background write, committed here */
        int64_t last = -1;
        ddl_status_t st = ddl_ckpt_wait(&last);
        if (st != DDL_OK)
            ckpt_failed("async checkpoint", last, st);
    }
    check(ddl_finalize(), "ddl_finalize");
    return ndiffer == 0 ? 0 : 1;

rejoin: /* --warm-restart: the agents started a new generation */
    {
        int old_rank = rank;
        ddl_status_t rs = ddl_rejoin(&comm);
        if (rs != DDL_OK) /* exit: the supervisor restarts this rank cold */
            die(1, "ddl_rejoin failed: %s: %s", ddl_status_str(rs), ddl_last_error());
        rank = ddl_rank();
        size = ddl_size();
        if (rank != old_rank)
            say("rank %d: now rank %d of %d\n", old_rank, rank, size);
        shard_max = (batch + (size_t)size - 1) / (size_t)size;
        rows = shard_max > EVAL_ROWS ? shard_max : EVAL_ROWS;
        work_free(&w);
        work_init(&w, rows);
        resumed++;
        goto resume;
    }
#undef CALL
}
