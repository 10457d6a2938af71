/* collectives/noucx/ucp/api/ucp.h: stands in for UCX's header of this name on the
 * include path of every libddl file but ucx.c (and of tests/unit/t_algos):
 * only the UCX transport may include UCX. */
#error "UCX included outside collectives/ucx.c: use the transport interface (transport.h)"
