/* check.h: the PASS/FAIL plumbing shared by the libddl test helpers that
 * run under ddlrun (nb-check, ckpt-check): every check prints one line
 * tagged with the rank, failures are counted for the exit status.
 * Header-only; include once per program, after setting check_rank. */
#ifndef DDL_TEST_CHECK_H
#define DDL_TEST_CHECK_H

#include <stdio.h>
#include <time.h>

#include "ddl.h"

static int check_rank;     /* this process's rank, for the messages */
static int check_failures; /* checks that failed so far */

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void check(int cond, const char *what)
{
    printf("rank %d: %s %s\n", check_rank, cond ? "PASS" : "FAIL", what);
    fflush(stdout);
    if (!cond)
        check_failures++;
}

/* expect: a libddl call returned st; want is the status it must return. */
static inline void expect(ddl_status_t st, ddl_status_t want, const char *what)
{
    if (st != want)
        fprintf(stderr, "rank %d: %s: got %s (%s), want %s\n", check_rank, what,
                ddl_status_str(st), ddl_last_error(), ddl_status_str(want));
    check(st == want, what);
}

#endif
