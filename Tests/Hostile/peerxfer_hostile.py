#!/usr/bin/env python3
"""A hand-written hostile peerxfer sender, for the receiver's hostile-client tests.

It speaks just enough of the protocol (docs/peerxfer-protocol.md) over TLS 1.3 with a client
certificate to put one kind of bad input in front of a `peerxfer serve`, then prints one JSON
line: the frames the receiver sent back (kind and decoded JSON) and whether it closed the
connection within --wait seconds.

    peerxfer_hostile.py MODE PORT --cert C --key K [--wait S]

Modes: traversal, combining ("../" then U+0301), absolute, nul, control, symlink (path "link/evil.txt"), huge-frame, garbage, trickle,
bad-chunk, version, flood (a chunk for a file announced as 1 byte, 1 MiB long), silent,
early-chunk (a chunk's header before the hello), big-hello (an 8 MiB hello), offer-wait and
offer-hangup (an offer of "big.bin" of --size bytes, then the answer awaited, or a hang-up).
"""
import argparse
import hashlib
import json
import socket
import ssl
import struct
import sys
import time

HELLO, MANIFEST, ANSWER, CHUNK, RESULT, DONE, SUMMARY, FILE_END, FAILURE = 1, 2, 3, 4, 5, 6, 7, 8, 0x7F
CHUNK_SIZE = 1 << 20


def frame(kind, payload):
    return bytes([kind]) + struct.pack(">I", len(payload)) + payload


def message(kind, obj):
    return frame(kind, json.dumps(obj).encode())


def entry(path, data=b"evil"):
    return {"path": path, "kind": "file", "size": len(data), "mode": 0o644, "modified": 0}


def hello(version=2):
    return message(HELLO, {"protocolVersion": version, "device": "hostile", "name": "Hostile \x1b[31mPeer"})


def manifest(*entries):
    return message(MANIFEST, {"chunkSize": CHUNK_SIZE, "entries": list(entries)})


def chunk(index, offset, data):
    return frame(CHUNK, struct.pack(">IQ", index, offset) + data)


def file_end(index, data):
    return frame(FILE_END, struct.pack(">I", index) + hashlib.sha256(data).digest())


def read_frames(tls, wait):
    """Frames until the peer closes or `wait` seconds pass; and whether it closed."""
    buffer, frames, closed = b"", [], False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        tls.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            data = tls.recv(65536)
        except socket.timeout:
            break
        except (ssl.SSLError, OSError) as error:
            closed = True
            frames.append({"kind": "error", "detail": str(error)})
            break
        if not data:
            closed = True
            break
        buffer += data
        while len(buffer) >= 5:
            kind, length = buffer[0], struct.unpack(">I", buffer[1:5])[0]
            if len(buffer) < 5 + length:
                break
            payload, buffer = buffer[5:5 + length], buffer[5 + length:]
            try:
                decoded = json.loads(payload) if kind != CHUNK else None
            except ValueError:
                decoded = None
            frames.append({"kind": kind, "json": decoded})
    return frames, closed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("port", type=int)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--wait", type=float, default=10)
    parser.add_argument("--size", type=int, default=0)
    args = parser.parse_args()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(args.cert, args.key)
    raw = socket.create_connection(("127.0.0.1", args.port), timeout=10)
    tls = context.wrap_socket(raw, server_hostname="peerxfer")

    mode = args.mode
    if mode == "traversal":
        tls.sendall(hello() + manifest(entry("../escape.txt")))
    elif mode == "combining":
        # A "/" followed by a combining mark: one character to Swift's String, a "/" to Linux.
        tls.sendall(hello() + manifest(entry("../\u0301x/evil.txt")))
    elif mode == "absolute":
        tls.sendall(hello() + manifest(entry("/tmp/peerxfer-absolute.txt")))
    elif mode == "nul":
        tls.sendall(hello() + manifest(entry("a\u0000b")))
    elif mode == "control":
        tls.sendall(hello() + manifest(entry("esc\x1b[2Jape")))
    elif mode == "symlink":
        tls.sendall(hello() + manifest(entry("link/evil.txt")))
        frames, _ = read_frames(tls, 5)   # the answer (the path itself is well-formed)
        # Then "done", as a sender does: the receiver may give a file's result only with its
        # batch's (a small file is opened when its batch is written, after its bytes came).
        tls.sendall(chunk(0, 0, b"evil") + file_end(0, b"evil") + message(DONE, {}))
        more, closed = read_frames(tls, args.wait)
        print(json.dumps({"frames": frames + more, "closed": closed}), flush=True)
        return
    elif mode == "huge-frame":
        tls.sendall(hello() + bytes([MANIFEST]) + struct.pack(">I", 0x7FFFFFFF) + b"{" * 1000)
    elif mode == "early-chunk":
        # A chunk's header before any hello, and only the start of its megabyte: it must be
        # refused from the header, not held until the rest arrives.
        tls.sendall(bytes([CHUNK]) + struct.pack(">I", CHUNK_SIZE + 12) + struct.pack(">IQ", 0, 0) + b"x" * 100)
    elif mode == "big-hello":
        tls.sendall(bytes([HELLO]) + struct.pack(">I", 8 << 20) + b"{" * 100)
    elif mode == "garbage":
        tls.sendall(b"\x42" * 4096)
    elif mode == "version":
        tls.sendall(hello(version=99))
    elif mode == "bad-chunk":
        tls.sendall(hello() + manifest(entry("fine.txt")))
        read_frames(tls, 5)
        tls.sendall(chunk(0, 4096, b"evil"))
    elif mode == "flood":
        tls.sendall(hello() + manifest(entry("one.txt", b"x")))
        read_frames(tls, 5)
        tls.sendall(chunk(0, 0, b"x" * CHUNK_SIZE))
    elif mode == "bogus-mtime":
        # An empty file (no chunks, only its end) whose time no file system holds.
        bogus = {"path": "when.txt", "kind": "file", "size": 0, "mode": 0o644, "modified": 1e300}
        tls.sendall(hello() + message(MANIFEST, {"chunkSize": CHUNK_SIZE, "entries": [bogus]}))
        read_frames(tls, 5)
        tls.sendall(file_end(0, b"") + message(DONE, {}))
    elif mode == "interleave":
        big = b"y" * (2 * CHUNK_SIZE)
        tls.sendall(hello() + manifest(entry("first.bin", big), entry("second.bin", big)))
        read_frames(tls, 5)
        tls.sendall(chunk(0, 0, big[:CHUNK_SIZE]) + chunk(1, 0, big[:CHUNK_SIZE]))
    elif mode in ("offer-wait", "offer-hangup"):
        # An offer of a large file ("big.bin", --size bytes); then the answer awaited, or a
        # hang-up at once (the receiver may be hashing its part file for the answer).
        tls.sendall(hello() + message(MANIFEST, {"chunkSize": CHUNK_SIZE, "entries": [
            {"path": "big.bin", "kind": "file", "size": args.size, "mode": 0o644, "modified": 0}]}))
        if mode == "offer-hangup":
            tls.close()
            print(json.dumps({"frames": [], "closed": True}))
            return
        # Until the answer (or the end): the receiver then waits for chunks that never come.
        frames, closed = [], False
        deadline = time.monotonic() + args.wait
        while not closed and time.monotonic() < deadline:
            more, closed = read_frames(tls, 0.2)
            frames += more
            if any(f["kind"] == ANSWER for f in more):
                break
        print(json.dumps({"frames": frames, "closed": closed}), flush=True)
        return
    elif mode == "silent":
        pass
    elif mode == "stall":
        # An offer answered, one chunk of a larger file, then nothing: alive, but no progress.
        data = b"s" * (4 * CHUNK_SIZE)
        tls.sendall(hello() + manifest(entry("stalled.bin", data)))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:   # the answer, and not a moment longer
            got, _ = read_frames(tls, 0.1)
            if any(f["kind"] == ANSWER for f in got):
                break
        tls.sendall(chunk(0, 0, data[:CHUNK_SIZE]))
    elif mode == "trickle":
        # A 64 MiB offer, then one chunk a second: alive, but far too slow to ever finish.
        size = 64 * CHUNK_SIZE
        data = b"z" * size
        tls.sendall(hello() + manifest(entry("slow.bin", data)))
        frames, closed = read_frames(tls, 5)
        offset = 0
        deadline = time.monotonic() + args.wait
        while not closed and offset < size and time.monotonic() < deadline:
            try:
                tls.sendall(chunk(0, offset, data[offset:offset + CHUNK_SIZE]))
            except (ssl.SSLError, OSError):
                break
            offset += CHUNK_SIZE
            more, closed = read_frames(tls, 1)
            frames += more
        print(json.dumps({"frames": frames, "closed": closed}), flush=True)
        return
    else:
        sys.exit("unknown mode " + mode)
    frames, closed = read_frames(tls, args.wait)
    print(json.dumps({"frames": frames, "closed": closed}), flush=True)


if __name__ == "__main__":
    main()
