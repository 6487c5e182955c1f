#!/usr/bin/env python3
"""A hand-written lying peerxfer receiver, for the sender's hostile-peer tests.

It listens with TLS 1.3 on 127.0.0.1 (a port of its own, printed as "listening on PORT"),
takes one sender, answers its hello and accepts its whole manifest, and then lies in one way
while it reads on until the sender closes (at most --wait seconds). The test publishes it
with avahi-publish under the key of --cert, so the sender finds and trusts it.

    peerxfer_fake_receiver.py MODE --cert C --key K [--wait S]

Modes:
  early-result        says file 0 is verified right after the answer, before its end was sent,
                      then reads nothing more
  withdrawn-verified  prints "got manifest", answers once the file --go names exists (the test
                      changes the offered file meanwhile, so the sender withdraws it), then
                      says file 0 is verified after its (withdrawing) end
"""
import argparse
import json
import os
import socket
import ssl
import struct
import sys
import time

HELLO, MANIFEST, ANSWER, CHUNK, RESULT, DONE, SUMMARY, FILE_END, FAILURE = 1, 2, 3, 4, 5, 6, 7, 8, 0x7F


def message(kind, obj):
    payload = json.dumps(obj).encode()
    return bytes([kind]) + struct.pack(">I", len(payload)) + payload


class Frames:
    """Reads frames from a TLS socket, keeping only the JSON ones' contents."""

    def __init__(self, tls):
        self.tls, self.buffer = tls, b""

    def next(self, deadline):
        while True:
            if len(self.buffer) >= 5:
                kind, length = self.buffer[0], struct.unpack(">I", self.buffer[1:5])[0]
                if len(self.buffer) >= 5 + length:
                    payload, self.buffer = self.buffer[5:5 + length], self.buffer[5 + length:]
                    return kind, (json.loads(payload) if kind in (HELLO, MANIFEST, DONE, FAILURE) else None)
            self.tls.settimeout(max(0.05, deadline - time.monotonic()))
            data = self.tls.recv(1 << 20)
            if not data:
                return None, None
            self.buffer += data


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["early-result", "withdrawn-verified"])
    parser.add_argument("--go", help="withdrawn-verified: answer once this file exists")
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--wait", type=float, default=30)
    args = parser.parse_args()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(args.cert, args.key)
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"listening on {listener.getsockname()[1]}", flush=True)
    listener.settimeout(args.wait)
    raw, _ = listener.accept()
    tls = context.wrap_socket(raw, server_side=True)
    deadline = time.monotonic() + args.wait
    frames = Frames(tls)
    seen = []
    try:
        kind, _ = frames.next(deadline)
        seen.append(kind)
        tls.sendall(message(HELLO, {"protocolVersion": 2, "device": "fake", "name": "Fake"}))
        kind, manifest = frames.next(deadline)
        seen.append(kind)
        entries = manifest["entries"]
        if args.mode == "withdrawn-verified":
            print("got manifest", flush=True)
            while not os.path.exists(args.go) and time.monotonic() < deadline:
                time.sleep(0.05)
        tls.sendall(message(ANSWER, {"accepted": [{"index": i, "have": []} for i in range(len(entries))]}))
        if args.mode == "early-result":
            tls.sendall(message(RESULT, {"index": 0, "verified": True, "storedAs": entries[0]["path"], "error": None}))
            # Then it reads nothing more: a file larger than every buffer on the way cannot
            # have been sent to its end, whatever the timing, so the verdict is a lie the sender
            # must catch by itself (and end the transfer). The test stops this process.
            while time.monotonic() < deadline:
                time.sleep(0.1)
        while time.monotonic() < deadline:
            kind, _ = frames.next(deadline)
            if kind is None:
                break
            seen.append(kind)
            if kind == FILE_END and args.mode == "withdrawn-verified":
                tls.sendall(message(RESULT, {"index": 0, "verified": True, "storedAs": entries[0]["path"], "error": None}))
    except (OSError, ssl.SSLError, ValueError) as error:
        seen.append(f"error: {error}")
    print(json.dumps({"frames": [k for k in seen if k != CHUNK], "chunks": seen.count(CHUNK)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
