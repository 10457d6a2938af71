/* link-delay: delay and jitter on a network namespace's packets, for
 * kernels without tc's netem qdisc.  Packets that an nftables/iptables
 * rule sends to netfilter queue QUEUE are held here DELAY_MS plus a
 * uniformly drawn -JITTER_MS..+JITTER_MS (at least 0), then accepted, like
 * `tc qdisc add ... netem delay DELAY_MS JITTER_MS` (whose default jitter
 * is uniform too).  As with netem, jitter reorders packets.
 *
 *   link-delay QUEUE DELAY_MS JITTER_MS [SEED]
 *
 * with, for example, in the namespace:
 *   iptables -A OUTPUT -o lo -j NFQUEUE --queue-num QUEUE --queue-bypass
 * (--queue-bypass: packets pass undelayed while no link-delay listens).
 * Runs until SIGTERM or SIGINT, then accepts every packet still held and
 * prints to stderr how many packets it held, the largest number held at
 * once and the messages the kernel dropped because this program fell behind
 * (ENOBUFS: those packets were dropped).  Needs CAP_NET_ADMIN. */
#define _GNU_SOURCE /* ppoll */
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct held {
    uint64_t due_ns;
    uint32_t id;
};

/* Packets held, a binary min-heap on due_ns. */
static struct held *heap;
static size_t nheld, cap;
static uint64_t delay_ns, jitter_ns, rng;
static unsigned long long total, most, dropped;
static volatile sig_atomic_t stop;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: the jitter needs no more than a fast uniform draw. */
static uint64_t draw(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1DULL;
}

static int push(uint64_t due, uint32_t id)
{
    if (nheld == cap) {
        size_t n = cap ? cap * 2 : 1024;
        struct held *h = realloc(heap, n * sizeof *h);
        if (!h)
            return -1;
        heap = h;
        cap = n;
    }
    size_t i = nheld++;
    while (i > 0 && heap[(i - 1) / 2].due_ns > due) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = (struct held){ due, id };
    return 0;
}

static struct held pop(void)
{
    struct held top = heap[0], last = heap[--nheld];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= nheld)
            break;
        if (c + 1 < nheld && heap[c + 1].due_ns < heap[c].due_ns)
            c++;
        if (heap[c].due_ns >= last.due_ns)
            break;
        heap[i] = heap[c];
        i = c;
    }
    if (nheld)
        heap[i] = last;
    return top;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *data)
{
    (void)msg;
    (void)data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    int64_t d = (int64_t)delay_ns;
    if (jitter_ns)
        d += (int64_t)(draw() % (2 * jitter_ns + 1)) - (int64_t)jitter_ns;
    if (d <= 0 || push(now_ns() + (uint64_t)d, id) != 0)
        return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
    total++;
    if (nheld > most)
        most = nheld;
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static long number(const char *what, const char *s, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max) {
        fprintf(stderr, "link-delay: %s: '%s' is not a number (0-%ld)\n", what, s, max);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: link-delay QUEUE DELAY_MS JITTER_MS [SEED]\n");
        return 2;
    }
    long queue = number("QUEUE", argv[1], 65535);
    delay_ns = (uint64_t)number("DELAY_MS", argv[2], 60000) * 1000000u;
    jitter_ns = (uint64_t)number("JITTER_MS", argv[3], 60000) * 1000000u;
    rng = argc == 5 ? (uint64_t)number("SEED", argv[4], 0x7fffffff) + 1 : now_ns() | 1;

    struct nfq_handle *h = nfq_open();
    if (!h) {
        fprintf(stderr, "link-delay: nfq_open: %s (needs CAP_NET_ADMIN and nfnetlink_queue)\n", strerror(errno));
        return 1;
    }
    struct nfq_q_handle *qh = nfq_create_queue(h, (uint16_t)queue, on_packet, NULL);
    if (!qh) {
        fprintf(stderr, "link-delay: queue %ld: %s (another program holds it?)\n", queue, strerror(errno));
        nfq_close(h);
        return 1;
    }
    /* Only the packet's id comes up (the verdict needs no more); GSO
     * packets come whole, as the qdisc would see them. */
    if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(qh, 1 << 16) < 0) {
        fprintf(stderr, "link-delay: queue %ld: setting it up: %s\n", queue, strerror(errno));
        return 1;
    }
    nfq_set_queue_flags(qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
    nfnl_rcvbufsiz(nfq_nfnlh(h), 8u << 20);

    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    int fd = nfq_fd(h);
    static char buf[65536] __attribute__((aligned));
    while (!stop) {
        uint64_t t = now_ns();
        while (nheld && heap[0].due_ns <= t)
            nfq_set_verdict(qh, pop().id, NF_ACCEPT, 0, NULL);
        struct timespec left, *wait = NULL;
        if (nheld) {
            uint64_t ns = heap[0].due_ns - t;
            left = (struct timespec){ (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
            wait = &left;
        }
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (ppoll(&p, 1, wait, NULL) <= 0)
            continue;
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && errno == ENOBUFS)
            dropped++;
        else if (n > 0)
            nfq_handle_packet(h, buf, (int)n);
    }
    while (nheld)
        nfq_set_verdict(qh, pop().id, NF_ACCEPT, 0, NULL);
    fprintf(stderr, "link-delay: queue %ld: %llu packets held, at most %llu at once, %llu kernel drops (ENOBUFS)\n",
        queue, total, most, dropped);
    nfq_destroy_queue(qh);
    nfq_close(h);
    free(heap);
    return 0;
}
