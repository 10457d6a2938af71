/* t_reduce.c: libddl's local reduction kernels and type/op validation:
 * a sample of ops on f32, f64, i32 and i64 (coll-check covers every op on
 * every type end to end), integer wrap-around without undefined behaviour,
 * the errors for unknown types, unknown ops and avg on integers. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "ddl_int.h"
#include "../tap.h"

int main(void)
{
    plan(NO_PLAN);
    float f[3] = {1, -2, 3};
    const float fi[3] = {0.5f, 4, -1};
    ddl_reduce_local(f, fi, 3, DDL_FLOAT32, DDL_SUM);
    ok(f[0] == 1.5f && f[1] == 2 && f[2] == 2, "f32 sum");
    double d[3] = {1, -2, 3};
    const double di[3] = {0.5, 4, -1};
    ddl_reduce_local(d, di, 3, DDL_FLOAT64, DDL_MIN);
    ok(d[0] == 0.5 && d[1] == -2 && d[2] == -1, "f64 min");
    ddl_reduce_local(d, di, 3, DDL_FLOAT64, DDL_MAX);
    ok(d[0] == 0.5 && d[1] == 4 && d[2] == -1, "f64 max");
    ddl_reduce_local(d, di, 3, DDL_FLOAT64, DDL_PROD);
    ok(d[0] == 0.25 && d[1] == 16 && d[2] == 1, "f64 prod");
    int32_t i[2] = {INT32_MAX, 5};
    const int32_t ii[2] = {1, -7};
    ddl_reduce_local(i, ii, 2, DDL_INT32, DDL_SUM);
    ok(i[0] == INT32_MIN && i[1] == -2, "i32 sum wraps like two's complement");
    int64_t l[2] = {3, -4};
    const int64_t li[2] = {-5, 6};
    ddl_reduce_local(l, li, 2, DDL_INT64, DDL_PROD);
    ok(l[0] == -15 && l[1] == -24, "i64 prod");
    ddl_reduce_local(l, li, 2, DDL_INT64, DDL_MIN);
    ok(l[0] == -15 && l[1] == -24, "i64 min");
    float s[2] = {3, 1};
    ddl_scale_local(s, 2, DDL_FLOAT32, 4);
    ok(s[0] == 0.75f && s[1] == 0.25f, "f32 scale for avg");
    ddl_reduce_local(f, fi, 0, DDL_FLOAT32, DDL_SUM);
    ok(f[0] == 1.5f, "count 0 touches nothing");

    is(ddl_dtype_size(DDL_FLOAT32), 4, "f32 is 4 bytes");
    is(ddl_dtype_size(DDL_INT64), 8, "i64 is 8 bytes");
    is(ddl_dtype_size((ddl_dtype_t)42), 0, "unknown type has size 0");
    is(ddl_check_dtype_op(DDL_FLOAT32, DDL_AVG), DDL_OK, "avg on f32 is offered");
    is(ddl_check_dtype_op(DDL_INT32, DDL_AVG), DDL_ERR_UNSUPPORTED, "avg on i32 is unsupported");
    is(ddl_check_dtype_op((ddl_dtype_t)9, DDL_SUM), DDL_ERR_INVALID, "unknown type is invalid");
    is(ddl_check_dtype_op(DDL_FLOAT64, (ddl_op_t)9), DDL_ERR_INVALID, "unknown op is invalid");
    ok(ddl_last_error()[0] != '\0', "the failure left a detail text: %s", ddl_last_error());
    return done_testing();
}
