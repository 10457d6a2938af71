/* reduce.c: element-wise local reductions used by every algorithm.  The
 * operand order is fixed (incoming op local) so that a given algorithm and
 * world size always produce the same bits.  Integer sums and products wrap
 * (computed unsigned), as two's-complement hardware does, instead of being
 * undefined behaviour. */
#include "config.h"

#include <string.h>

#include "ddl_int.h"

#define DDL_REDUCE_LOOP(T, EXPR)                                             \
    do {                                                                     \
        T *restrict o_ = inout;                                              \
        const T *restrict i_ = in;                                           \
        for (size_t k = 0; k < count; k++) {                                 \
            T a = i_[k], b = o_[k];                                          \
            o_[k] = (EXPR);                                                  \
        }                                                                    \
    } while (0)

#define DDL_REDUCE_TYPE(T, UT)                                                 \
    switch (op) {                                                            \
    case DDL_SUM:                                                            \
    case DDL_AVG:                                                            \
        DDL_REDUCE_LOOP(T, (T)((UT)a + (UT)b));                                       \
        break;                                                               \
    case DDL_PROD:                                                           \
        DDL_REDUCE_LOOP(T, (T)((UT)a * (UT)b));                                       \
        break;                                                               \
    case DDL_MIN:                                                            \
        DDL_REDUCE_LOOP(T, a < b ? a : b);                                   \
        break;                                                               \
    case DDL_MAX:                                                            \
        DDL_REDUCE_LOOP(T, a > b ? a : b);                                   \
        break;                                                               \
    }

/* ---- 16-bit floating point: reduced in float, rounded to nearest even ---- */

float ddl_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf or nan */
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t ddl_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan (keep nan quiet and non-zero) */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (absx < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = absx >> 23, man = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t half_man = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half_man & 1)))
            half_man++;
        return (uint16_t)(sign | half_man);
    }
    uint32_t e = (absx >> 23) - 127 + 15, man = absx & 0x7fffff;
    uint32_t h = (e << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent: still correct */
    return (uint16_t)(sign | h);
}

float ddl_bf16_to_float(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t ddl_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static float f16_op(float a, float b, ddl_op_t op)
{
    switch (op) {
    case DDL_PROD: return a * b;
    case DDL_MIN: return a < b ? a : b;
    case DDL_MAX: return a > b ? a : b;
    default: return a + b;
    }
}

#define DDL_REDUCE_16(TO_F, FROM_F)                                          \
    do {                                                                     \
        uint16_t *o_ = inout;                                                \
        const uint16_t *i_ = in;                                             \
        for (size_t k = 0; k < count; k++)                                   \
            o_[k] = FROM_F(f16_op(TO_F(i_[k]), TO_F(o_[k]), op));            \
    } while (0)

void ddl_reduce_local(void *inout, const void *in, size_t count, ddl_dtype_t dtype, ddl_op_t op)
{
    switch (dtype) {
    case DDL_FLOAT32:
        DDL_REDUCE_TYPE(float, float);
        break;
    case DDL_FLOAT64:
        DDL_REDUCE_TYPE(double, double);
        break;
    case DDL_INT32:
        DDL_REDUCE_TYPE(int32_t, uint32_t);
        break;
    case DDL_INT64:
        DDL_REDUCE_TYPE(int64_t, uint64_t);
        break;
    case DDL_UINT8:
        DDL_REDUCE_TYPE(uint8_t, unsigned);
        break;
    case DDL_FLOAT16:
        DDL_REDUCE_16(ddl_half_to_float, ddl_float_to_half);
        break;
    case DDL_BFLOAT16:
        DDL_REDUCE_16(ddl_bf16_to_float, ddl_float_to_bf16);
        break;
    }
}

void ddl_reduce_ordered(void *inout, const void *in, size_t count, ddl_dtype_t dtype,
                        ddl_op_t op, int in_first)
{
    if (in_first) {
        ddl_reduce_local(inout, in, count, dtype, op);
        return;
    }
    /* inout = inout (op) in: swap roles through the kernel's fixed order by
     * reducing into a copy of in, then moving the result back. */
    size_t es = ddl_dtype_size(dtype);
    unsigned char tmp[4096];
    for (size_t done = 0; done < count;) {
        size_t n = count - done;
        if (n * es > sizeof tmp)
            n = sizeof tmp / es;
        memcpy(tmp, (const unsigned char *)in + done * es, n * es);
        ddl_reduce_local(tmp, (unsigned char *)inout + done * es, n, dtype, op);
        memcpy((unsigned char *)inout + done * es, tmp, n * es);
        done += n;
    }
}

void ddl_scale_local(void *buf, size_t count, ddl_dtype_t dtype, double divisor)
{
    if (dtype == DDL_FLOAT16 || dtype == DDL_BFLOAT16) {
        uint16_t *p = buf;
        float d = (float)divisor;
        for (size_t k = 0; k < count; k++)
            p[k] = dtype == DDL_FLOAT16 ? ddl_float_to_half(ddl_half_to_float(p[k]) / d)
                                        : ddl_float_to_bf16(ddl_bf16_to_float(p[k]) / d);
    } else if (dtype == DDL_FLOAT32) {
        float *p = buf, d = (float)divisor;
        for (size_t k = 0; k < count; k++)
            p[k] /= d;
    } else if (dtype == DDL_FLOAT64) {
        double *p = buf;
        for (size_t k = 0; k < count; k++)
            p[k] /= divisor;
    }
}

size_t ddl_dtype_size(ddl_dtype_t dtype)
{
    switch (dtype) {
    case DDL_FLOAT32: return 4;
    case DDL_FLOAT64: return 8;
    case DDL_INT32: return 4;
    case DDL_INT64: return 8;
    case DDL_FLOAT16: return 2;
    case DDL_BFLOAT16: return 2;
    case DDL_UINT8: return 1;
    }
    return 0;
}

ddl_status_t ddl_check_dtype_op(ddl_dtype_t dtype, ddl_op_t op)
{
    if (ddl_dtype_size(dtype) == 0)
        return ddl_fail(DDL_ERR_INVALID, "unknown data type %d", (int)dtype);
    if ((unsigned)op > DDL_AVG)
        return ddl_fail(DDL_ERR_INVALID, "unknown reduction %d", (int)op);
    if (op == DDL_AVG && (dtype == DDL_INT32 || dtype == DDL_INT64 || dtype == DDL_UINT8))
        return ddl_fail(DDL_ERR_UNSUPPORTED, "DDL_AVG is offered for floating-point types only "
                        "(use DDL_SUM and divide)");
    return DDL_OK;
}
