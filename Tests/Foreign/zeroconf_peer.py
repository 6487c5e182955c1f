#!/usr/bin/python3
"""python-zeroconf (Debian's python3-zeroconf) as a foreign mDNS stack for the lab tests.

  zeroconf_peer.py publish ADDRESS NAME TYPE PORT [KEY=VALUE ...]
      Publishes NAME (TYPE, e.g. _ipp._tcp) on the interface with ADDRESS (IPv4), on a host of
      its own, zc-<first word of NAME>.local, at ADDRESS; prints "published" once registered
      and stays until SIGTERM or SIGINT, then says goodbye.
  zeroconf_peer.py browse ADDRESS TYPE SECONDS
      Browses TYPE on the interface with ADDRESS for SECONDS and prints one line per service it
      found and resolved: "found;NAME;HOST;ADDRESS;PORT;KEY=VALUE,...".

It speaks mDNS itself (its own socket on port 5353 beside avahi-daemon's), so what it sees is
what a phone or laptop running another stack would see.
"""
import signal
import socket
import sys
import threading
import time

from zeroconf import IPVersion, ServiceBrowser, ServiceInfo, ServiceStateChange, Zeroconf


def publish(address, name, kind, port, pairs):
    zc = Zeroconf(interfaces=[address], ip_version=IPVersion.V4Only)
    host = "zc-" + "".join(c for c in name.split()[0].lower() if c.isalnum()) + ".local."
    properties = dict(pair.split("=", 1) for pair in pairs)
    info = ServiceInfo(
        kind + ".local.", name + "." + kind + ".local.", addresses=[socket.inet_aton(address)], port=int(port),
        properties=properties, server=host)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    zc.register_service(info)
    print("published", flush=True)
    stop.wait()
    zc.unregister_service(info)
    zc.close()


def browse(address, kind, seconds):
    zc = Zeroconf(interfaces=[address], ip_version=IPVersion.V4Only)
    found = set()
    lock = threading.Lock()

    def changed(zeroconf, service_type, name, state_change):
        if state_change is not ServiceStateChange.Added:
            return
        with lock:
            if name in found:
                return
            found.add(name)
        # (Resolved off the browser's thread: get_service_info waits for answers.)
        threading.Thread(target=resolve, args=(service_type, name), daemon=True).start()

    def resolve(service_type, name):
        info = zc.get_service_info(service_type, name, timeout=5000)
        if info is None:
            print("unresolved;" + name, flush=True)
            return
        txt = ",".join(
            k.decode(errors="replace") + "=" + (v or b"").decode(errors="replace")
            for k, v in sorted(info.properties.items()))
        addresses = ",".join(info.parsed_addresses())
        instance = name[: -len(service_type) - 1]
        print(f"found;{instance};{info.server};{addresses};{info.port};{txt}", flush=True)

    ServiceBrowser(zc, kind + ".local.", handlers=[changed])
    time.sleep(float(seconds))
    zc.close()


def main(argv):
    if len(argv) >= 6 and argv[1] == "publish":
        publish(argv[2], argv[3], argv[4], argv[5] if len(argv) > 5 else "0", argv[6:])
    elif len(argv) == 5 and argv[1] == "browse":
        browse(argv[2], argv[3], argv[4])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
