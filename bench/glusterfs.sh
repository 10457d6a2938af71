#!/bin/sh
# glusterfs.sh: a shared file system on one machine for the checkpoint
# benchmarks: a one-brick GlusterFS volume served by this host and mounted
# through GlusterFS's FUSE client, so that the "shared directory" of
# run-ckpt-levels.sh goes through a network file system's client, protocol
# (TCP on this host's own address) and server instead of the local disk.
#
#   bench/glusterfs.sh start MOUNT [BRICK]   (default brick /var/tmp/ddl-gluster-brick)
#   bench/glusterfs.sh stop MOUNT [BRICK]
#
# Root, a kernel with FUSE (/dev/fuse).  Installs glusterfs-server and
# glusterfs-client (Debian) when glusterd is missing.  The client's own
# caches that would let one emulated node read what another wrote from the
# one shared client (io-cache, quick-read) are off; a real deployment has
# one client per node.  `stop` unmounts, deletes the volume and the brick,
# and ends glusterd if `start` started it.
set -eu
vol=ddlbench
cmd=${1:-}
mnt=${2:-}
brick=${3:-/var/tmp/ddl-gluster-brick}
if [ -z "$cmd" ] || [ -z "$mnt" ]; then
    echo "usage: glusterfs.sh start|stop MOUNT [BRICK]" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ]; then
    echo "glusterfs.sh: needs root (glusterd, mount)" >&2
    exit 1
fi
# glusterd refuses loopback addresses for a brick: the first global IPv4 one
addr=$(ip -4 -o addr show scope global | awk '{sub("/.*", "", $4); print $4; exit}')
if [ -z "$addr" ]; then
    echo "glusterfs.sh: this host has no global IPv4 address for the brick (glusterd refuses 127.0.0.1)" >&2
    exit 1
fi
gl() { gluster --mode=script "$@"; }
case $cmd in
start)
    if [ ! -c /dev/fuse ]; then
        echo "glusterfs.sh: no /dev/fuse: this kernel cannot mount a FUSE file system" >&2
        exit 1
    fi
    if ! command -v glusterd >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q glusterfs-server glusterfs-client >/dev/null
    fi
    if ! gl volume list >/dev/null 2>&1; then
        glusterd
        touch /run/ddl-glusterfs.started # stop ends only the daemons started here
        for _ in $(seq 50); do # glusterd answers a second or so after it starts
            gl volume list >/dev/null 2>&1 && break
            sleep 0.2
        done
        if ! gl volume list >/dev/null; then
            echo "glusterfs.sh: glusterd does not answer (see /var/log/glusterfs/glusterd.log)" >&2
            exit 1
        fi
    fi
    if ! gl volume info "$vol" >/dev/null 2>&1; then
        mkdir -p "$brick"
        gl volume create "$vol" "$addr:$brick/b" force >/dev/null
        gl volume set "$vol" performance.io-cache off >/dev/null
        gl volume set "$vol" performance.quick-read off >/dev/null
    fi
    gl volume start "$vol" force >/dev/null
    mkdir -p "$mnt"
    mountpoint -q "$mnt" || mount -t glusterfs "$addr:/$vol" "$mnt"
    echo "glusterfs.sh: volume $vol ($addr:$brick/b) mounted at $mnt"
    ;;
stop)
    ! mountpoint -q "$mnt" || umount "$mnt"
    if command -v gluster >/dev/null && gl volume info "$vol" >/dev/null 2>&1; then
        gl volume stop "$vol" force >/dev/null || true
        gl volume delete "$vol" >/dev/null || true
    fi
    if [ -e /run/ddl-glusterfs.started ]; then
        pkill -x glusterfsd 2>/dev/null || true
        pkill -x glusterd 2>/dev/null || true
        rm -f /run/ddl-glusterfs.started
    fi
    rm -rf "$brick"
    ;;
*)
    echo "glusterfs.sh: unknown command '$cmd' (start or stop)" >&2
    exit 2
    ;;
esac
