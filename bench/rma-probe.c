/* rma-probe.c: does UCX RMA (put + completion flag) beat the tag API for
 * moving a buffer to a peer that must know it has arrived?  That is the
 * question libddl's transport choice rests on, and this program
 * answers it for the UCX transports of this machine, on the buffers a
 * training program has: its own (malloc'd, then registered with
 * ucp_mem_map) or, for comparison, memory that UCX allocates itself (what
 * ucx_perftest uses, which UCX can place in shared memory).
 *
 * Two processes (fork; worker addresses and rkeys over a socketpair) play
 * ping-pong: each one-way transfer is either a tag send matched by a
 * posted receive, or a put followed by ucp_worker_fence and an 8-byte put
 * of a sequence number into the peer's flag word, which the peer polls.
 * Printed: half the round-trip time and the bandwidth it implies, per
 * size, for both methods and both kinds of memory.  UCX_TLS and the other
 * UCX_* variables apply as usual.
 *
 *   rma-probe [-b min] [-e max] [-n iters]
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

typedef struct {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h ep;
    int sock;
} probe_t;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, ucs_status_t st)
{
    fprintf(stderr, "rma-probe: %s: %s\n", what, ucs_status_string(st));
    exit(1);
}

/* The worker to progress while waiting for the peer on the socket (a
 * peer's flush or close may need this side's answers). */
static ucp_worker_h progress_worker;

/* xfer: send a length-prefixed blob to the peer and receive its blob. */
static void *xfer(int sock, const void *buf, size_t len, size_t *rlen)
{
    uint64_t l = len, pl;
    if (write(sock, &l, sizeof l) != sizeof l || write(sock, buf, len) != (ssize_t)len) {
        fprintf(stderr, "rma-probe: exchange with the peer failed: %s\n", strerror(errno));
        exit(1);
    }
    struct pollfd pf = {.fd = sock, .events = POLLIN};
    while (progress_worker && poll(&pf, 1, 0) == 0)
        ucp_worker_progress(progress_worker);
    if (read(sock, &pl, sizeof pl) != sizeof pl) {
        fprintf(stderr, "rma-probe: exchange with the peer failed: %s\n", strerror(errno));
        exit(1);
    }
    char *p = malloc(pl ? pl : 1);
    for (size_t got = 0; got < pl;) {
        ssize_t n = read(sock, p + got, pl - got);
        if (n <= 0) {
            fprintf(stderr, "rma-probe: exchange with the peer failed\n");
            exit(1);
        }
        got += (size_t)n;
    }
    if (rlen)
        *rlen = pl;
    return p;
}

static void wait_req(probe_t *p, void *req, const char *what)
{
    if (req == NULL)
        return;
    if (UCS_PTR_IS_ERR(req))
        die(what, UCS_PTR_STATUS(req));
    while (ucp_request_check_status(req) == UCS_INPROGRESS)
        ucp_worker_progress(p->worker);
    ucs_status_t st = ucp_request_check_status(req);
    ucp_request_free(req);
    if (st != UCS_OK)
        die(what, st);
}

/* A buffer with its registration and the peer's matching rkey/address. */
typedef struct {
    char *buf;
    ucp_mem_h memh;
    uint64_t remote;
    ucp_rkey_h rkey;
} region_t;

static void region_setup(probe_t *p, region_t *r, size_t len, int ucx_alloc)
{
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .length = len,
    };
    if (ucx_alloc) {
        mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.flags = UCP_MEM_MAP_ALLOCATE;
        mp.address = NULL;
    } else {
        if (posix_memalign((void **)&r->buf, 4096, len))
            exit(1);
        memset(r->buf, 0, len);
        mp.address = r->buf;
    }
    ucs_status_t st = ucp_mem_map(p->ctx, &mp, &r->memh);
    if (st != UCS_OK)
        die("ucp_mem_map", st);
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ucp_mem_query(r->memh, &ma);
    r->buf = ma.address;
    memset(r->buf, 0, len);
    void *rk;
    size_t rklen;
    st = ucp_rkey_pack(p->ctx, r->memh, &rk, &rklen);
    if (st != UCS_OK)
        die("ucp_rkey_pack", st);
    size_t bl = sizeof(uint64_t) + rklen;
    char *blob = malloc(bl);
    uint64_t a = (uintptr_t)r->buf;
    memcpy(blob, &a, sizeof a);
    memcpy(blob + sizeof a, rk, rklen);
    ucp_rkey_buffer_release(rk);
    char *peer = xfer(p->sock, blob, bl, NULL);
    memcpy(&r->remote, peer, sizeof r->remote);
    st = ucp_ep_rkey_unpack(p->ep, peer + sizeof(uint64_t), &r->rkey);
    if (st != UCS_OK)
        die("ucp_ep_rkey_unpack", st);
    free(blob);
    free(peer);
}

static void region_free(probe_t *p, region_t *r, int ucx_alloc)
{
    ucp_rkey_destroy(r->rkey);
    ucp_mem_unmap(p->ctx, r->memh);
    if (!ucx_alloc)
        free(r->buf);
}

/* One ping-pong run: returns the mean one-way time in microseconds. */
static double run(probe_t *p, int me, region_t *data, region_t *flag, size_t len, int iters,
                  int put)
{
    volatile uint64_t *myflag = (volatile uint64_t *)flag->buf;
    uint64_t seq = *myflag;
    double t0 = 0;
    for (int i = -10; i < iters; i++) { /* 10 warm-up round trips */
        if (i == 0)
            t0 = now_us();
        for (int turn = 0; turn < 2; turn++) {
            ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH,
                                      .memh = data->memh};
            if (turn == me) { /* send */
                if (put) {
                    static uint64_t val;
                    val = seq + 1;
                    wait_req(p, ucp_put_nbx(p->ep, data->buf, len, data->remote, data->rkey, &rp),
                             "put");
                    ucp_worker_fence(p->worker);
                    ucp_request_param_t fp = {0};
                    wait_req(p, ucp_put_nbx(p->ep, &val, sizeof val, flag->remote, flag->rkey, &fp),
                             "flag put");
                } else {
                    wait_req(p, ucp_tag_send_nbx(p->ep, data->buf, len, 7, &rp), "send");
                }
            } else if (put) {
                while (*myflag == seq)
                    ucp_worker_progress(p->worker);
            } else {
                wait_req(p, ucp_tag_recv_nbx(p->worker, data->buf, len, 7, UINT64_MAX, &rp),
                         "recv");
            }
            seq++;
        }
    }
    double t = now_us() - t0;
    return t / iters / 2;
}

static void side(int me, int sock, size_t bmin, size_t bmax, int iters)
{
    probe_t p = {.sock = sock};
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        die("ucp_config_read", st);
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                       .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA};
    if ((st = ucp_init(&pp, cfg, &p.ctx)) != UCS_OK)
        die("ucp_init", st);
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((st = ucp_worker_create(p.ctx, &wp, &p.worker)) != UCS_OK)
        die("ucp_worker_create", st);
    progress_worker = p.worker;
    ucp_address_t *addr;
    size_t alen;
    ucp_worker_get_address(p.worker, &addr, &alen);
    void *peer = xfer(sock, addr, alen, NULL);
    ucp_worker_release_address(p.worker, addr);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer};
    if ((st = ucp_ep_create(p.worker, &ep, &p.ep)) != UCS_OK)
        die("ucp_ep_create", st);
    free(peer);

    if (me == 0)
        printf("# one-way time (us) and bandwidth (GB/s) of a transfer the receiver knows "
               "has arrived\n# %-10s %12s %10s %12s %10s %12s %10s %12s %10s\n", "bytes",
               "tag-user", "GB/s", "put-user", "GB/s", "tag-ucxmem", "GB/s", "put-ucxmem",
               "GB/s");
    for (size_t len = bmin; len <= bmax; len *= 4) {
        double t[4];
        for (int ua = 0; ua < 2; ua++) {
            region_t data = {0}, flag = {0};
            region_setup(&p, &data, len, ua);
            region_setup(&p, &flag, 4096, ua);
            int it = len >= (1u << 22) ? iters / 10 + 2 : iters;
            for (int put = 0; put < 2; put++) {
                free(xfer(sock, "", 0, NULL)); /* both sides start together */
                t[ua * 2 + put] = run(&p, me, &data, &flag, len, it, put);
            }
            ucp_request_param_t fp = {0}; /* the puts done before the keys go */
            wait_req(&p, ucp_ep_flush_nbx(p.ep, &fp), "flush");
            free(xfer(sock, "", 0, NULL));
            region_free(&p, &flag, ua);
            region_free(&p, &data, ua);
        }
        if (me == 0) {
            printf("  %-10zu", len);
            for (int k = 0; k < 4; k++)
                printf(" %12.2f %10.2f", t[k], (double)len / t[k] / 1e3);
            printf("\n");
            fflush(stdout);
        }
    }
    ucp_request_param_t cp = {0};
    void *creq = ucp_ep_close_nbx(p.ep, &cp);
    if (creq && UCS_PTR_IS_PTR(creq)) {
        while (ucp_request_check_status(creq) == UCS_INPROGRESS)
            ucp_worker_progress(p.worker);
        ucp_request_free(creq);
    }
    free(xfer(sock, "", 0, NULL));
    progress_worker = NULL;
    ucp_worker_destroy(p.worker);
    ucp_cleanup(p.ctx);
}

int main(int argc, char **argv)
{
    size_t bmin = 65536, bmax = 64u << 20;
    int iters = 200, c;
    while ((c = getopt(argc, argv, "b:e:n:")) != -1) {
        char *end;
        unsigned long long v = strtoull(optarg, &end, 10);
        if (*end == 'K' || *end == 'k')
            v <<= 10, end++;
        else if (*end == 'M' || *end == 'm')
            v <<= 20, end++;
        if (*end || v == 0) {
            fprintf(stderr, "rma-probe: -%c: '%s' is not a positive size/count (e.g. 64K)\n",
                    c, optarg);
            return 2;
        }
        if (c == 'b')
            bmin = v;
        else if (c == 'e')
            bmax = v;
        else if (c == 'n')
            iters = (int)v;
        else
            return 2;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
        perror("rma-probe: socketpair");
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("rma-probe: fork");
        return 1;
    }
    if (pid == 0) {
        close(sv[0]);
        side(1, sv[1], bmin, bmax, iters);
        _exit(0);
    }
    close(sv[1]);
    side(0, sv[0], bmin, bmax, iters);
    int ws;
    waitpid(pid, &ws, 0);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : 1;
}
