// What peerxfer needs of Linux that Swift's Glibc module leaves out: fstatfs(2), to tell
// which file system the inbox is on (Core/Storage/DirectWrites.swift). An app of its own, as
// peerxfer is meant to be read: it brings its own system headers, not Salut's.
#include <sys/vfs.h>
