/* tap.h: a small Test Anything Protocol emitter for ddl's unit tests.
 *
 * Header-only.  A test program calls plan(N) or plan(NO_PLAN), then ok(),
 * is(), is_str(), skip() and diag() as needed, and ends with done_testing(),
 * which returns the exit status.  Failures print the file, line and the
 * compared values as TAP diagnostics, so the automake test log shows each
 * failing assertion.  BAIL_OUT() stops the whole run on a broken setup.
 * Not thread-safe: call from one thread.
 */
#ifndef DDL_TAP_H
#define DDL_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_PLAN (-1)

static int tap_planned = -2; /* -2: no plan() yet */
static int tap_run;
static int tap_failed;

static inline void plan(int n)
{
    tap_planned = n;
    if (n >= 0)
        printf("1..%d\n", n);
    fflush(stdout);
}

static inline void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void diag(const char *fmt, ...)
{
    va_list ap;
    char buf[4096];
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* One "# " per line so multi-line text stays a diagnostic. */
    for (char *line = buf, *nl; line && *line; line = nl) {
        nl = strchr(line, '\n');
        if (nl)
            *nl++ = '\0';
        printf("# %s\n", line);
    }
    fflush(stdout);
}

static inline int tap_ok(int pass, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int tap_ok(int pass, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    tap_run++;
    printf("%s %d - ", pass ? "ok" : "not ok", tap_run);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!pass) {
        tap_failed++;
        printf("#   Failed test at %s line %d.\n", file, line);
    }
    fflush(stdout);
    return pass;
}

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* is: compare two integers (as long long) and show both on failure. */
#define is(got, want, ...)                                                    \
    do {                                                                      \
        long long tap_g_ = (long long)(got), tap_w_ = (long long)(want);      \
        if (!tap_ok(tap_g_ == tap_w_, __FILE__, __LINE__, __VA_ARGS__))       \
            diag("         got: %lld\n    expected: %lld", tap_g_, tap_w_);   \
    } while (0)

/* is_str: compare two strings (NULL allowed) and show both on failure. */
#define is_str(got, want, ...)                                                \
    do {                                                                      \
        const char *tap_g_ = (got), *tap_w_ = (want);                         \
        int tap_eq_ = (tap_g_ && tap_w_) ? strcmp(tap_g_, tap_w_) == 0        \
                                         : tap_g_ == tap_w_;                  \
        if (!tap_ok(tap_eq_, __FILE__, __LINE__, __VA_ARGS__))                \
            diag("         got: '%s'\n    expected: '%s'",                    \
                 tap_g_ ? tap_g_ : "(null)", tap_w_ ? tap_w_ : "(null)");     \
    } while (0)

/* skip: record n skipped tests with a reason. */
static inline void skip(int n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void skip(int n, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    for (int i = 0; i < n; i++)
        printf("ok %d # SKIP %s\n", ++tap_run, why);
    fflush(stdout);
}

/* skip_all: the whole program is skipped; prints the plan and exits 0. */
static inline void skip_all(const char *why)
{
    printf("1..0 # SKIP %s\n", why);
    fflush(stdout);
    exit(0);
}

static inline void BAIL_OUT(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void BAIL_OUT(const char *fmt, ...)
{
    va_list ap;
    printf("Bail out! ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(255);
}

/* done_testing: print the plan if none was given, and return the exit
 * status for main(): 0 when every test passed and the plan was kept. */
static inline int done_testing(void)
{
    if (tap_planned == NO_PLAN || tap_planned == -2)
        printf("1..%d\n", tap_run);
    else if (tap_planned != tap_run) {
        diag("planned %d tests but ran %d", tap_planned, tap_run);
        tap_failed++;
    }
    fflush(stdout);
    return tap_failed ? 1 : 0;
}

#endif /* DDL_TAP_H */
