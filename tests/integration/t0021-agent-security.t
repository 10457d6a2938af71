#!/bin/sh
# t0021-agent-security: the links between a step's agents are authenticated
# both ways and bounded before authentication (see docs/security.md).
# tests/helpers/agent-attack starts real ddl-agent processes of a made-up
# multi-node step on loopback and plays the other nodes:
#  - a stranger without the secret floods the leader's port (64 MiB frames,
#    700,000 small frames never read back, forged and replayed
#    authentications, 1,100 idle connections past the agent's descriptor
#    limit) while node 1 keeps its link: the leader's beats keep coming, its
#    memory stays small, it does not spin, its Unix socket answers;
#  - an authenticated node 1 names a rank twice, another node's ranks, a
#    second link of its own; a second supervisor registers a live rank: all
#    refused, the step goes on; a peer's string with a newline never
#    becomes a log line;
#  - a fake leader learns nothing (no secret on the wire) and is not
#    believed; a leader with the secret cannot crash an agent with an
#    impossible world map or put a newline in MASTER_ADDR.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/integration/lib.sh"
ATTACK="$top_builddir/tests/helpers/agent-attack"
[ -x "$ATTACK" ] || t_skip_all "agent-attack not built"
# not exec: lib.sh's exit trap removes $T_TMP (and anything left running)
timeout 180 "$ATTACK" "$DDL_AGENT"
exit $?
