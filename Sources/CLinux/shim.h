// Linux headers Swift's Glibc module leaves out: SalutStreams' readiness loop
// (Socket/ReadinessLoop.swift) uses epoll.
#include <sys/epoll.h>
