/* crc32c.h: CRC-32C (Castagnoli) for checkpoint shards and manifests. */
#ifndef DDL_CRC32C_H
#define DDL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* ddl_crc32c: extend crc (0 to start) over len bytes of buf.  Uses the
 * SSE4.2 crc32 instruction when the CPU has it, else ddl_crc32c_sw(); both
 * give the same value (crc32c("123456789") == 0xe3069283).  Thread-safe. */
uint32_t ddl_crc32c(uint32_t crc, const void *buf, size_t len);

/* ddl_crc32c_sw: the table-driven (slicing-by-8) software version. */
uint32_t ddl_crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif
