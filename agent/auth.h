/* auth.h: mutual authentication of the TCP links between a step's agents,
 * and the integrity of every frame after it.
 *
 * Both ends know the step's secret; it never crosses the wire.  The node
 * that connects sends PEER_AUTH with a fresh 32-byte nonce and an
 * HMAC-SHA-256 of its claims (step, node, host, listen address, nonce)
 * under the secret.  The listening agent checks it before it answers
 * anything; then it answers PEER_WELCOME with its own fresh nonce and an
 * HMAC, under the secret, that covers both nonces, so the connecting side
 * knows it reached an agent of the step (a recorded welcome does not match
 * a new nonce).  Both derive a key per direction from the two nonces; every
 * later frame on the link carries a 16-byte HMAC tag over a per-direction
 * sequence number and the frame, checked before the frame is decoded.  A
 * frame replayed, reordered, cut or sent on another link fails its tag.
 *
 * HMAC-SHA-256 is OpenSSL's libcrypto.  Every function is thread-compatible
 * (no shared state); none blocks except ddl_auth_nonce (getrandom, which
 * blocks only before the kernel's pool is first initialised).
 */
#ifndef DDL_AUTH_H
#define DDL_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define DDL_AUTH_NONCE 32 /* bytes of each side's nonce */
#define DDL_AUTH_MAC 32   /* bytes of the handshake MACs */
#define DDL_AUTH_TAG 16   /* bytes of the tag after every frame of a linked pair */
#define DDL_AUTH_KEY 32

/* One direction of a link: its key and the next frame's sequence number. */
typedef struct {
    uint8_t key[DDL_AUTH_KEY];
    uint64_t seq;
} ddl_auth_dir_t;

typedef struct {
    ddl_auth_dir_t tx, rx;
} ddl_auth_link_t;

/* ddl_auth_nonce: DDL_AUTH_NONCE random bytes (getrandom).  0, or -1 with
 * errno and err. */
int ddl_auth_nonce(uint8_t out[DDL_AUTH_NONCE], ddl_error_t *err);

/* ddl_auth_hello_mac: the connecting side's MAC over its claims: the step id,
 * its node, its host name and listen address (NULL counts as ""), and its
 * nonce.  0, or -1 (libcrypto failed; errno EIO). */
int ddl_auth_hello_mac(const uint8_t *secret, size_t secret_len, const char *step,
                       uint32_t node_id, const char *host, const char *listen,
                       const uint8_t nonce_c[DDL_AUTH_NONCE], uint8_t out[DDL_AUTH_MAC]);

/* ddl_auth_welcome_mac: the listening side's MAC over the step id, both
 * nodes and both nonces.  0, or -1 (errno EIO). */
int ddl_auth_welcome_mac(const uint8_t *secret, size_t secret_len, const char *step,
                         uint32_t leader_node, uint32_t peer_node,
                         const uint8_t nonce_c[DDL_AUTH_NONCE],
                         const uint8_t nonce_s[DDL_AUTH_NONCE], uint8_t out[DDL_AUTH_MAC]);

/* ddl_auth_link_init: the link's two keys from the secret and both nonces;
 * `connecting` says which end this is (1: the side that sent PEER_AUTH).
 * Sequence numbers start at 0.  0, or -1 (errno EIO). */
int ddl_auth_link_init(ddl_auth_link_t *l, const uint8_t *secret, size_t secret_len,
                       const uint8_t nonce_c[DDL_AUTH_NONCE],
                       const uint8_t nonce_s[DDL_AUTH_NONCE], int connecting);

/* ddl_auth_tag: the tag of the next frame sent (advances tx's sequence).
 * 0, or -1 (errno EIO). */
int ddl_auth_tag(ddl_auth_dir_t *tx, const uint8_t *frame, size_t len,
                 uint8_t tag[DDL_AUTH_TAG]);

/* ddl_auth_check: whether tag is the next received frame's (constant-time
 * comparison; advances rx's sequence only when it is).  1 match, 0 not,
 * -1 (errno EIO). */
int ddl_auth_check(ddl_auth_dir_t *rx, const uint8_t *frame, size_t len,
                   const uint8_t tag[DDL_AUTH_TAG]);

/* ddl_auth_equal: constant-time comparison of n bytes: 1 equal, 0 not. */
int ddl_auth_equal(const void *a, const void *b, size_t n);

#endif
