/* t_auth: the agents' link authentication (agent/auth.c): handshake MACs
 * bind every claim and both nonces, link keys differ per direction and per
 * link, and a frame's tag catches a changed byte, a replay, a reordering and
 * a frame moved to another link. */
#include "config.h"

#include <string.h>

#include "auth.h"
#include "../tap.h"

static const uint8_t secret[32] = "0123456789abcdef0123456789abcdef";

static void test_handshake(void)
{
    uint8_t nc[DDL_AUTH_NONCE], ns[DDL_AUTH_NONCE], a[DDL_AUTH_MAC], b[DDL_AUTH_MAC];
    ddl_error_t err;
    ok(ddl_auth_nonce(nc, &err) == 0 && ddl_auth_nonce(ns, &err) == 0 &&
           memcmp(nc, ns, sizeof nc) != 0, "two nonces differ");
    ok(ddl_auth_hello_mac(secret, sizeof secret, "12.0", 1, "n1", "10.0.0.2:99", nc, a) == 0,
       "hello MAC computed");
    ddl_auth_hello_mac(secret, sizeof secret, "12.0", 1, "n1", "10.0.0.2:99", nc, b);
    ok(ddl_auth_equal(a, b, sizeof a), "the same claims give the same MAC");
    ddl_auth_hello_mac(secret, sizeof secret, "12.1", 1, "n1", "10.0.0.2:99", nc, b);
    ok(!ddl_auth_equal(a, b, sizeof a), "another step, another MAC");
    ddl_auth_hello_mac(secret, sizeof secret, "12.0", 2, "n1", "10.0.0.2:99", nc, b);
    ok(!ddl_auth_equal(a, b, sizeof a), "another node, another MAC");
    ddl_auth_hello_mac(secret, sizeof secret, "12.0", 1, "n1", "10.0.0.3:99", nc, b);
    ok(!ddl_auth_equal(a, b, sizeof a), "another listen address, another MAC");
    /* fields are length-prefixed: moving a byte between two fields changes it */
    ddl_auth_hello_mac(secret, sizeof secret, "12.0", 1, "n", "110.0.0.2:99", nc, b);
    ok(!ddl_auth_equal(a, b, sizeof a), "a byte moved from host to listen changes the MAC");
    uint8_t other[32];
    memcpy(other, secret, sizeof other);
    other[31] ^= 1;
    ddl_auth_hello_mac(other, sizeof other, "12.0", 1, "n1", "10.0.0.2:99", nc, b);
    ok(!ddl_auth_equal(a, b, sizeof a), "another secret (one bit), another MAC");
    ddl_auth_welcome_mac(secret, sizeof secret, "12.0", 0, 1, nc, ns, a);
    ddl_auth_welcome_mac(secret, sizeof secret, "12.0", 0, 1, ns, nc, b);
    ok(!ddl_auth_equal(a, b, sizeof a), "welcome MAC: the nonces' order matters");
    ddl_auth_welcome_mac(secret, sizeof secret, "12.0", 0, 2, nc, ns, b);
    ok(!ddl_auth_equal(a, b, sizeof a), "welcome MAC names the node it answers");
}

static void test_link(void)
{
    uint8_t nc[DDL_AUTH_NONCE], ns[DDL_AUTH_NONCE], tag[DDL_AUTH_TAG], tag2[DDL_AUTH_TAG];
    ddl_auth_link_t c, s, s2;
    uint8_t frame[64];
    memset(frame, 7, sizeof frame);
    ddl_auth_nonce(nc, NULL);
    ddl_auth_nonce(ns, NULL);
    ok(ddl_auth_link_init(&c, secret, sizeof secret, nc, ns, 1) == 0 &&
           ddl_auth_link_init(&s, secret, sizeof secret, nc, ns, 0) == 0,
       "both ends derive the link's keys");
    ok(memcmp(c.tx.key, s.rx.key, DDL_AUTH_KEY) == 0 &&
           memcmp(c.rx.key, s.tx.key, DDL_AUTH_KEY) == 0 &&
           memcmp(c.tx.key, c.rx.key, DDL_AUTH_KEY) != 0,
       "one key per direction, the same at both ends");
    ddl_auth_tag(&c.tx, frame, sizeof frame, tag);
    ok(ddl_auth_check(&s.rx, frame, sizeof frame, tag) == 1, "a frame's tag checks");
    ok(ddl_auth_check(&s.rx, frame, sizeof frame, tag) == 0, "the same frame again (a replay) fails");
    ddl_auth_tag(&c.tx, frame, sizeof frame, tag);  /* seq 1 */
    ddl_auth_tag(&c.tx, frame, sizeof frame, tag2); /* seq 2 */
    ok(ddl_auth_check(&s.rx, frame, sizeof frame, tag2) == 0, "a frame out of order fails");
    ok(ddl_auth_check(&s.rx, frame, sizeof frame, tag) == 1 &&
           ddl_auth_check(&s.rx, frame, sizeof frame, tag2) == 1, "in order they check");
    ddl_auth_tag(&c.tx, frame, sizeof frame, tag);
    frame[10] ^= 1;
    ok(ddl_auth_check(&s.rx, frame, sizeof frame, tag) == 0, "a changed byte fails");
    frame[10] ^= 1;
    ok(ddl_auth_check(&s.rx, frame, sizeof frame - 1, tag) == 0, "a cut frame fails");
    ok(ddl_auth_check(&s.rx, frame, sizeof frame, tag) == 1, "and the true frame still checks");
    uint8_t ns2[DDL_AUTH_NONCE];
    ddl_auth_nonce(ns2, NULL);
    ddl_auth_link_init(&s2, secret, sizeof secret, nc, ns2, 0);
    ddl_auth_link_t c2 = c;
    c2.tx.seq = 0;
    ddl_auth_tag(&c2.tx, frame, sizeof frame, tag);
    ok(ddl_auth_check(&s2.rx, frame, sizeof frame, tag) == 0, "a frame moved to another link fails");
    ok(ddl_auth_equal("abc", "abc", 3) && !ddl_auth_equal("abc", "abd", 3), "constant-time compare");
}

int main(void)
{
    plan(NO_PLAN);
    test_handshake();
    test_link();
    return done_testing();
}
