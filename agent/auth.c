/* auth.c: the handshake MACs, link keys and frame tags of the links between
 * a step's agents (see auth.h), with HMAC-SHA-256 from OpenSSL's libcrypto.
 * Every MAC input starts with a label naming its use and gives each
 * variable-length field its length, so no two uses or field splits can
 * produce the same input.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "auth.h"

typedef struct {
    const void *p;
    size_t len;
} part_t;

/* hmac: HMAC-SHA-256 under key over the parts, each preceded by its length
 * (u32, network order), into out (32 bytes).  libcrypto starts without the
 * site's openssl.cnf: nothing there changes an HMAC, and skipping it saves
 * about 0.3 ms of the first call's 1 ms. */
static int hmac(const uint8_t *key, size_t key_len, const part_t *parts, size_t n, uint8_t *out)
{
    int ok = 0;
    OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    size_t got = 0;
    if (ctx && EVP_MAC_init(ctx, key, key_len, params)) {
        ok = 1;
        for (size_t i = 0; i < n && ok; i++) {
            uint8_t be[4] = {(uint8_t)(parts[i].len >> 24), (uint8_t)(parts[i].len >> 16),
                             (uint8_t)(parts[i].len >> 8), (uint8_t)parts[i].len};
            ok = EVP_MAC_update(ctx, be, 4) && EVP_MAC_update(ctx, parts[i].p, parts[i].len);
        }
        ok = ok && EVP_MAC_final(ctx, out, &got, 32) && got == 32;
    }
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    if (!ok) {
        errno = EIO;
        return -1;
    }
    return 0;
}

static part_t str_part(const char *s)
{
    return (part_t){s ? s : "", s ? strlen(s) : 0};
}

static void be32(uint8_t b[4], uint32_t v)
{
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

int ddl_auth_nonce(uint8_t out[DDL_AUTH_NONCE], ddl_error_t *err)
{
    size_t got = 0;
    while (got < DDL_AUTH_NONCE) {
        ssize_t n = getrandom(out + got, DDL_AUTH_NONCE - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ddl_errprintf(err, "getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    return 0;
}

int ddl_auth_hello_mac(const uint8_t *secret, size_t secret_len, const char *step,
                       uint32_t node_id, const char *host, const char *listen,
                       const uint8_t nonce_c[DDL_AUTH_NONCE], uint8_t out[DDL_AUTH_MAC])
{
    uint8_t node[4];
    be32(node, node_id);
    part_t p[] = {str_part("ddl agent hello v1"), str_part(step), {node, 4}, str_part(host),
                  str_part(listen), {nonce_c, DDL_AUTH_NONCE}};
    return hmac(secret, secret_len, p, sizeof p / sizeof p[0], out);
}

int ddl_auth_welcome_mac(const uint8_t *secret, size_t secret_len, const char *step,
                         uint32_t leader_node, uint32_t peer_node,
                         const uint8_t nonce_c[DDL_AUTH_NONCE],
                         const uint8_t nonce_s[DDL_AUTH_NONCE], uint8_t out[DDL_AUTH_MAC])
{
    uint8_t ln[4], pn[4];
    be32(ln, leader_node);
    be32(pn, peer_node);
    part_t p[] = {str_part("ddl agent welcome v1"), str_part(step), {ln, 4}, {pn, 4},
                  {nonce_c, DDL_AUTH_NONCE}, {nonce_s, DDL_AUTH_NONCE}};
    return hmac(secret, secret_len, p, sizeof p / sizeof p[0], out);
}

int ddl_auth_link_init(ddl_auth_link_t *l, const uint8_t *secret, size_t secret_len,
                       const uint8_t nonce_c[DDL_AUTH_NONCE],
                       const uint8_t nonce_s[DDL_AUTH_NONCE], int connecting)
{
    uint8_t c2s[DDL_AUTH_KEY], s2c[DDL_AUTH_KEY];
    part_t a[] = {str_part("ddl agent link v1: connecting to listening"),
                  {nonce_c, DDL_AUTH_NONCE}, {nonce_s, DDL_AUTH_NONCE}};
    part_t b[] = {str_part("ddl agent link v1: listening to connecting"),
                  {nonce_c, DDL_AUTH_NONCE}, {nonce_s, DDL_AUTH_NONCE}};
    if (hmac(secret, secret_len, a, 3, c2s) < 0 || hmac(secret, secret_len, b, 3, s2c) < 0)
        return -1;
    memcpy(l->tx.key, connecting ? c2s : s2c, DDL_AUTH_KEY);
    memcpy(l->rx.key, connecting ? s2c : c2s, DDL_AUTH_KEY);
    l->tx.seq = l->rx.seq = 0;
    OPENSSL_cleanse(c2s, sizeof c2s);
    OPENSSL_cleanse(s2c, sizeof s2c);
    return 0;
}

static int frame_mac(const ddl_auth_dir_t *d, const uint8_t *frame, size_t len, uint8_t out[32])
{
    uint8_t seq[8];
    for (int i = 0; i < 8; i++)
        seq[i] = (uint8_t)(d->seq >> (56 - 8 * i));
    part_t p[] = {{seq, 8}, {frame, len}};
    return hmac(d->key, DDL_AUTH_KEY, p, 2, out);
}

int ddl_auth_tag(ddl_auth_dir_t *tx, const uint8_t *frame, size_t len, uint8_t tag[DDL_AUTH_TAG])
{
    uint8_t full[32];
    if (frame_mac(tx, frame, len, full) < 0)
        return -1;
    memcpy(tag, full, DDL_AUTH_TAG);
    tx->seq++;
    return 0;
}

int ddl_auth_check(ddl_auth_dir_t *rx, const uint8_t *frame, size_t len,
                   const uint8_t tag[DDL_AUTH_TAG])
{
    uint8_t full[32];
    if (frame_mac(rx, frame, len, full) < 0)
        return -1;
    if (!ddl_auth_equal(full, tag, DDL_AUTH_TAG))
        return 0;
    rx->seq++;
    return 1;
}

int ddl_auth_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}
