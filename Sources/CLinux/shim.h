// Linux headers Swift's Glibc module leaves out. SalutStreams' readiness loop
// (Socket/ReadinessLoop.swift) is the one user.
#include <sys/epoll.h>
