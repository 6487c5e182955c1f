#!/usr/bin/python3
"""A hostile device on the link: announces COUNT services at once by raw multicast DNS.

  mdns_flood.py ADDRESS TYPE COUNT [goodbye] [--gap MS]

Sends unsolicited announcements from port 5353 on the interface with ADDRESS (IPv4): for each
of flood0 .. flood<COUNT-1> a PTR under TYPE.local, its SRV (port 9, host flood-host.local),
its TXT, and flood-host.local's A record at ADDRESS, a few services a packet (the first also
lists TYPE under _services._dns-sd._udp.local). With `goodbye`,
the same records with TTL 0 (they leave). It neither probes nor answers: it floods and exits,
printing how many packets it sent (MS milliseconds apart, default 2) and when the first went (the monotonic clock, which every
lab host shares): "sent 625 packets from 12345.678901".
"""
import socket
import struct
import sys
import time


def name(text):
    out = b""
    for label in text.split("."):
        out += bytes([len(label.encode())]) + label.encode()
    return out + b"\0"


def record(owner, rtype, ttl, data, flush=False):
    return owner + struct.pack(">HHIH", rtype, 0x8001 if flush else 1, ttl, len(data)) + data


def main(argv):
    gap = 0.002
    if len(argv) >= 3 and argv[-2] == "--gap":
        gap = float(argv[-1]) / 1000
        argv = argv[:-2]
    if len(argv) not in (4, 5) or (len(argv) == 5 and argv[4] != "goodbye"):
        print(__doc__, file=sys.stderr)
        return 2
    address, kind, count = argv[1], argv[2], int(argv[3])
    leaving = len(argv) == 5
    host = name("flood-host.local")
    address_record = record(host, 1, 0 if leaving else 120, socket.inet_aton(address), True)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", 5353))  # mDNS answers count only from port 5353
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(address))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
    packets = 0
    first_sent = None
    per_packet = 8
    for first in range(0, count, per_packet):
        records = []
        for index in range(first, min(count, first + per_packet)):
            instance = "flood%d" % index
            full = bytes([len(instance)]) + instance.encode() + name(kind + ".local")
            records.append(record(name(kind + ".local"), 12, 0 if leaving else 4500, full))
            records.append(record(full, 33, 0 if leaving else 120, struct.pack(">HHH", 0, 0, 9) + host, True))
            records.append(record(full, 16, 0 if leaving else 4500, b"\x07n=%05d" % index, True))
        records.append(address_record)
        if first == 0:
            # The type in DNS-SD's list of types, as a responder announces it (RFC 6763 §9).
            records.append(record(name("_services._dns-sd._udp.local"), 12, 0 if leaving else 4500, name(kind + ".local")))
        packet = struct.pack(">HHHHHH", 0, 0x8400, 0, len(records), 0, 0) + b"".join(records)
        if first_sent is None:
            first_sent = time.monotonic()
        s.sendto(packet, ("224.0.0.251", 5353))
        packets += 1
        time.sleep(gap)  # (a burst, not a wall: the kernel's socket buffers stay ahead)
    print("sent %d packets from %.6f" % (packets, first_sent or 0), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
