// Linux headers Swift's Glibc module leaves out. SalutStreams' readiness loop
// (Socket/ReadinessLoop.swift) uses epoll; peerxfer's direct writes
// (Examples/PeerTransfer/Core/Storage/DirectWrites.swift) use fstatfs.
#include <sys/epoll.h>
#include <sys/vfs.h>
