/* fuzz_proto.c: libFuzzer target for the frame decoder, ddl_proto_decode
 * (common/proto.c), which reads what any local process or, over TCP, any
 * host sends to ddl-agent.  The input is a byte stream of frames, decoded
 * as the agent does (frame after frame until one is incomplete or bad).
 * Besides ASan/UBSan's checks it asserts:
 * - a frame decoded from n bytes is "incomplete" (0) from fewer bytes;
 * - a decoded message that encodes again decodes again, whole, to the same
 *   type. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ddl_error_t err;
    ddl_msg_t m, m2;
    size_t off = 0;
    while (off < size) {
        ssize_t used = ddl_proto_decode(data + off, size - off, &m, &err);
        if (used <= 0)
            break;
        if ((size_t)used < DDL_PROTO_HDR_LEN || (size_t)used > size - off)
            abort();
        /* fewer bytes of the same frame: incomplete, never an error */
        if (ddl_proto_decode(data + off, (size_t)used - 1, &m2, &err) != 0)
            abort();
        ddl_msg_clear(&m2);
        uint8_t *frame;
        size_t len;
        if (ddl_proto_encode(&m, &frame, &len) == 0) {
            ssize_t again = ddl_proto_decode(frame, len, &m2, &err);
            if (again != (ssize_t)len || m2.type != m.type) {
                fprintf(stderr, "re-decoding a %s frame of %zu bytes gave %zd: %s\n",
                        ddl_msg_type_str(m.type), len, again, again < 0 ? err.text : "");
                abort();
            }
            ddl_msg_clear(&m2);
            free(frame);
        }
        ddl_msg_clear(&m);
        off += (size_t)used;
    }
    return 0;
}
