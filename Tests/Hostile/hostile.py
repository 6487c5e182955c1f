#!/usr/bin/env python3
"""Hostile and well-behaved LAN peers for Salut's hostile-peer tests.

Each mode plays one kind of peer against a service on 127.0.0.1:PORT and stops by itself
(after --hold seconds at most). Well-behaved clients ("good") print one JSON line with what
they saw; every mode prints "ready" on stdout once its hostile connections are in place, so a
test can run good clients while they are held.

    hostile.py garbage PORT --count 50            random bytes, then close
    hostile.py hello-silence PORT --count 100     a TLS ClientHello, then nothing
    hostile.py silent PORT --count 500            connect, then nothing
    hostile.py never-read PORT --count 20         send 1 MiB each, never read the answer
    hostile.py reset-mid PORT --count 20          send 256 KiB, then reset (RST)
    hostile.py cycles PORT --count 2000           connect and close, one after another
    hostile.py good PORT --count 5 [--tls --cafile F]   echo round trips; exit 1 on any failure
"""
import argparse
import json
import os
import select
import socket
import ssl
import sys
import time


def connect(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def hold(sockets, seconds):
    """Keeps the sockets open (reading nothing) until the time is up or stdin closes."""
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        readable, _, _ = select.select([sys.stdin], [], [], max(0.0, min(1.0, end - time.monotonic())))
        if readable and not sys.stdin.readline():
            break
    for s in sockets:
        try:
            s.close()
        except OSError:
            pass


def garbage(args):
    failures = 0
    for i in range(args.count):
        try:
            s = connect(args.port)
            s.sendall(os.urandom(4096))
            s.close()
        except OSError:
            failures += 1
    print(json.dumps({"mode": "garbage", "sent": args.count - failures}), flush=True)


def hello_silence(args):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    held = []
    for _ in range(args.count):
        raw = connect(args.port)
        raw.setblocking(False)
        tls = context.wrap_socket(raw, do_handshake_on_connect=False)
        try:
            tls.do_handshake()   # sends the ClientHello, then would wait for the answer
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError:
            pass
        held.append(tls)
    hold(held, args.hold)


def silent(args):
    held = []
    for _ in range(args.count):
        try:
            held.append(connect(args.port))
        except OSError:
            pass
    hold(held, args.hold)


def never_read(args):
    held = []
    chunk = os.urandom(64 * 1024)
    for _ in range(args.count):
        s = connect(args.port)
        s.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 2
        while sent < (1 << 20) and time.monotonic() < deadline:
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                select.select([], [s], [], 0.05)
            except OSError:
                break
        held.append(s)
    hold(held, args.hold)


def reset_mid(args):
    chunk = os.urandom(64 * 1024)
    for _ in range(args.count):
        s = connect(args.port)
        try:
            for _ in range(4):
                s.sendall(chunk)
        except OSError:
            pass
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    print(json.dumps({"mode": "reset-mid", "count": args.count}), flush=True)


def cycles(args):
    refused = 0
    for _ in range(args.count):
        try:
            s = connect(args.port)
            s.close()
        except OSError:
            refused += 1
    print(json.dumps({"mode": "cycles", "count": args.count, "refused": refused}), flush=True)


def good(args):
    results = []
    ok = True
    for i in range(args.count):
        message = ("hello %d from a good peer\n" % i).encode()
        start = time.monotonic()
        answer = b""
        error = None
        try:
            s = connect(args.port, timeout=args.timeout)
            s.settimeout(args.timeout)
            if args.tls:
                context = ssl.create_default_context(cafile=args.cafile)
                context.check_hostname = False
                s = context.wrap_socket(s)
            s.sendall(message)
            while len(answer) < len(message):
                data = s.recv(4096)
                if not data:
                    break
                answer += data
            s.close()
        except (OSError, ssl.SSLError, ValueError) as e:
            error = "%s: %s" % (type(e).__name__, e)
        seconds = time.monotonic() - start
        served = error is None and answer == message
        ok = ok and served
        results.append({"served": served, "seconds": round(seconds, 3), "error": error})
    print(json.dumps({"mode": "good", "results": results,
                      "slowest": max(r["seconds"] for r in results)}), flush=True)
    sys.exit(0 if ok else 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["garbage", "hello-silence", "silent", "never-read", "reset-mid", "cycles", "good"])
    parser.add_argument("port", type=int)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--hold", type=float, default=60.0, help="seconds to hold connections at most (default 60)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a good client waits (default 10)")
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--cafile")
    args = parser.parse_args()
    {"garbage": garbage, "hello-silence": hello_silence, "silent": silent, "never-read": never_read,
     "reset-mid": reset_mid, "cycles": cycles, "good": good}[args.mode](args)


if __name__ == "__main__":
    main()
