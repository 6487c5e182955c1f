// What peerxfer needs of Linux that Swift's Glibc module leaves out: fstatfs(2), to tell
// which file system the inbox is on (Core/Storage/DirectWrites.swift), and the kernel's own
// asynchronous I/O (io_setup(2) and its kin, which glibc does not wrap), to hand the disk many
// files' direct writes in one call (Core/Storage/DirectWriteBatch.swift). An app of its own, as
// peerxfer is meant to be read: it brings its own system headers, not Salut's.
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>
#include <string.h>
#include <linux/aio_abi.h>

// Each returns what the system call returns (-1 with errno set on failure).

static inline int peerxfer_io_setup(unsigned requests, aio_context_t *context) {
    return (int)syscall(SYS_io_setup, requests, context);
}

static inline int peerxfer_io_destroy(aio_context_t context) {
    return (int)syscall(SYS_io_destroy, context);
}

static inline long peerxfer_io_submit(aio_context_t context, long count, struct iocb **requests) {
    return syscall(SYS_io_submit, context, count, requests);
}

static inline long peerxfer_io_getevents(aio_context_t context, long least, long most, struct io_event *events) {
    return syscall(SYS_io_getevents, context, least, most, events, NULL);
}

// Fills `request` as a write of `count` bytes from `bytes` to `fd` at `offset`, told apart by `tag`.
static inline void peerxfer_io_prepare_write(struct iocb *request, int fd, const void *bytes, size_t count,
                                             long long offset, unsigned long long tag) {
    memset(request, 0, sizeof *request);
    request->aio_data = tag;
    request->aio_lio_opcode = IOCB_CMD_PWRITE;
    request->aio_fildes = (unsigned)fd;
    request->aio_buf = (unsigned long long)(unsigned long)bytes;
    request->aio_nbytes = count;
    request->aio_offset = offset;
}
