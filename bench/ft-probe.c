/* ft-probe.c: the program bench/run-restart.sh fails on purpose, to time
 * ddlrun's failure detection and restart.
 *
 *   ddlrun -n N --restarts 1 [--hang-timeout S] ft-probe [ITERS]
 *
 * Each rank runs 8-byte allreduces every 10 ms.  After the first one of a
 * generation, rank 0 prints "first-step gen G at T" (T: CLOCK_REALTIME in
 * ns), so the time from a failure to the new generation's first step can be
 * read off.  Generation 0 runs until it is failed from outside (the script
 * kills or stops a rank); later generations stop after ITERS steps
 * (default 50) and exit 0.
 *
 * With FT_PROBE_IGNORE_TERM=1 it ignores SIGTERM, like a program that
 * saves its state on SIGTERM before it exits: then only a collective that
 * returns (aborted by the agents' notice, DDL_ERR_ABORTED) ends it before
 * its supervisor's SIGKILL.  A failed allreduce is reported with the time.
 * With FT_PROBE_WARM=1 it opts in to warm restarts (ddl_warm_enable): a
 * rank that is kept rejoins the new generation (ddl_rejoin) and goes on,
 * printing the new generation's first step in the same way.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ddl.h"

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 50;
    const char *g = getenv("DDL_GENERATION");
    long gen = g ? strtol(g, NULL, 10) : 0;
    const char *ign = getenv("FT_PROBE_IGNORE_TERM");
    if (ign && *ign == '1')
        signal(SIGTERM, SIG_IGN);
    ddl_status_t st = ddl_init();
    if (st != DDL_OK) {
        fprintf(stderr, "ft-probe: ddl_init: %s: %s\n", ddl_status_str(st), ddl_last_error());
        return 1;
    }
    const char *w = getenv("FT_PROBE_WARM");
    if (w && *w == '1' && (st = ddl_warm_enable()) != DDL_OK)
        fprintf(stderr, "ft-probe: ddl_warm_enable: %s: %s\n", ddl_status_str(st),
                ddl_last_error());
    for (long i = 0; gen == 0 || i < iters; i++) {
        double x = 1;
        st = ddl_allreduce(ddl_comm_world(), DDL_IN_PLACE, &x, 1, DDL_FLOAT64, DDL_SUM);
        if (st == DDL_RESTART) { /* kept: the next generation, in this process */
            if ((st = ddl_rejoin(NULL)) != DDL_OK) {
                fprintf(stderr, "ft-probe: ddl_rejoin: %s: %s\n", ddl_status_str(st),
                        ddl_last_error());
                return 1;
            }
            g = getenv("DDL_GENERATION");
            gen = g ? strtol(g, NULL, 10) : gen + 1;
            i = -1;
            continue;
        }
        if (st != DDL_OK) {
            fprintf(stderr, "ft-probe: rank %d: ddl_allreduce at %lld: %s: %s\n", ddl_rank(),
                    now_ns(), ddl_status_str(st), ddl_last_error());
            return 1;
        }
        if (i == 0 && ddl_rank() == 0) {
            printf("first-step gen %ld at %lld\n", gen, now_ns());
            fflush(stdout);
        }
        usleep(10000);
    }
    ddl_finalize();
    return 0;
}
