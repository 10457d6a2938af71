#!/usr/bin/python3
"""congest.py: delay and jitter on loopback links without netem (which this
kernel may lack), for bench/run-restart.sh: run inside a network namespace
whose lo is shaped by an htb class, e.g.

    ip netns exec NS tc qdisc add dev lo root handle 1: htb default 1
    ip netns exec NS tc class add dev lo parent 1: classid 1:1 htb rate 8mbit

  congest.py flood N CLAMP   N bulk TCP flows through 127.0.0.1, each with
                             its window clamped to CLAMP bytes: the queue in
                             the shaper, and so the delay of everything else
                             on the link, stays bounded and varies (runs
                             until killed)
  congest.py rtt N           N round trips of 64 bytes, 0.1 s apart;
                             prints p50, p99, min and max in ms
"""
import socket
import sys
import threading
import time


def flood(n, clamp):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, clamp)
    srv.bind(("127.0.0.1", 0))
    srv.listen(n)

    def drain(c):
        while c.recv(1 << 16):
            pass

    def sink():
        while True:
            c, _ = srv.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamp)
            threading.Thread(target=drain, args=(c,), daemon=True).start()

    def source():
        s = socket.create_connection(srv.getsockname())
        buf = b"x" * (1 << 16)
        while True:
            s.sendall(buf)

    threading.Thread(target=sink, daemon=True).start()
    for _ in range(n):
        threading.Thread(target=source, daemon=True).start()
    while True:
        time.sleep(1)


def rtt(n):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def echo():
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            d = c.recv(64)
            if not d:
                return
            c.sendall(d)

    threading.Thread(target=echo, daemon=True).start()
    s = socket.create_connection(srv.getsockname())
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = []
    for _ in range(n):
        a = time.monotonic()
        s.sendall(b"p" * 64)
        got = 0
        while got < 64:
            got += len(s.recv(64 - got))
        t.append((time.monotonic() - a) * 1000)
        time.sleep(0.1)
    t.sort()
    k = min(n - 1, -(-99 * n // 100) - 1)
    print("round trip ms: p50 %.0f, p99 %.0f, min %.0f, max %.0f (%d)" % (t[n // 2], t[k], t[0], t[-1], n))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "flood":
        flood(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "rtt":
        rtt(int(sys.argv[2]))
    else:
        sys.exit(__doc__)
