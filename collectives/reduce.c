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
        T *o_ = inout;                                                       \
        const T *i_ = in;                                                    \
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
    if (dtype == DDL_FLOAT32) {
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
    }
    return 0;
}

ddl_status_t ddl_check_dtype_op(ddl_dtype_t dtype, ddl_op_t op)
{
    if (ddl_dtype_size(dtype) == 0)
        return ddl_fail(DDL_ERR_INVALID, "unknown data type %d", (int)dtype);
    if ((unsigned)op > DDL_AVG)
        return ddl_fail(DDL_ERR_INVALID, "unknown reduction %d", (int)op);
    if (op == DDL_AVG && (dtype == DDL_INT32 || dtype == DDL_INT64))
        return ddl_fail(DDL_ERR_UNSUPPORTED, "DDL_AVG is offered for floating-point types only "
                        "(use DDL_SUM and divide)");
    return DDL_OK;
}
