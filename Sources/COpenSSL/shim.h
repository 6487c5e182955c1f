// The OpenSSL headers Salut uses, and inline wrappers for the few OpenSSL "functions" that are
// really macros (Swift cannot call a C macro with arguments).
#ifndef SALUT_COPENSSL_SHIM_H
#define SALUT_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/sha.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/hmac.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

static inline int salut_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}
static inline int salut_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_max_proto_version(ctx, version);
}
static inline long salut_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}
static inline int salut_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}
static inline long salut_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_session_cache_mode(ctx, mode);
}
// A fresh application ex-data index on SSL objects (SSL_get_ex_new_index is a macro).
static inline int salut_SSL_get_ex_new_index(void) {
    return SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}
// True when the error at the head of OpenSSL's queue says the peer closed the TCP connection
// without sending close_notify (a truncation; OpenSSL 3 reports it as an SSL error).
static inline int salut_error_is_unexpected_eof(void) {
    unsigned long code = ERR_peek_error();
    return ERR_GET_LIB(code) == ERR_LIB_SSL && ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
}
// Salut's socket BIO. It sends with MSG_NOSIGNAL: OpenSSL's own socket BIO writes with
// write(2), which raises SIGPIPE (and by default ends the process) when the peer has gone. It
// reads ahead: one recv(2) takes up to SALUT_BIO_READ_AHEAD bytes, from which OpenSSL's small
// reads (a record's 5-byte header, then its body) are served, instead of two recv(2) calls per
// record. The read-ahead memory is taken for a burst and given back once OpenSSL has taken all
// of it, so an idle connection holds none. Bytes read ahead but not taken by OpenSSL (plain
// bytes after a peer's close_notify) stay in the BIO and can be taken back with
// salut_BIO_take_unread, so nothing is lost when a connection leaves TLS; bytes read in the
// clear before TLS starts again go in front with salut_BIO_preload. The state is the BIO's
// data; the BIO never closes the descriptor. Only one thread uses a BIO at a time (the pump's
// queue, as for the SSL object that owns it).
// 96 KiB: six records a recv(2) (32 KiB took one call per two), and below glibc's mmap
// threshold (128 KiB), so each burst's memory comes from the heap: at 256 KiB, a fresh mapping
// and its page faults per burst cost more than the calls saved.
#define SALUT_BIO_READ_AHEAD 98304
typedef struct {
    int fd;
    size_t start;            // the first unread byte in `bytes`
    size_t end;              // one past the last
    unsigned char *bytes;    // SALUT_BIO_READ_AHEAD bytes while some are unread, else NULL
} salut_bio_state;

static void salut_bio_release(salut_bio_state *state) {
    OPENSSL_free(state->bytes);
    state->bytes = NULL;
    state->start = 0;
    state->end = 0;
}
static int salut_bio_write(BIO *bio, const char *data, int length) {
    salut_bio_state *state = (salut_bio_state *)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (!state) return -1;
    ssize_t n = send(state->fd, data, (size_t)length, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(bio);
    return (int)n;
}
static int salut_bio_read(BIO *bio, char *data, int length) {
    salut_bio_state *state = (salut_bio_state *)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (!state) return -1;
    if (length <= 0) return 0;   // (OpenSSL never asks for nothing)
    if (state->start == state->end) {
        if (!state->bytes) state->bytes = (unsigned char *)OPENSSL_malloc(SALUT_BIO_READ_AHEAD);
        // Without memory for reading ahead, read only what was asked.
        void *into = state->bytes ? (void *)state->bytes : (void *)data;
        size_t room = state->bytes ? SALUT_BIO_READ_AHEAD : (size_t)length;
        ssize_t n = recv(state->fd, into, room, 0);
        if (n <= 0 || !state->bytes) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(bio);
            int saved = errno;
            if (state->bytes) salut_bio_release(state);
            errno = saved;
            return (int)n;
        }
        state->start = 0;
        state->end = (size_t)n;
    }
    size_t count = state->end - state->start;
    if (count > (size_t)length) count = (size_t)length;
    memcpy(data, state->bytes + state->start, count);
    state->start += count;
    if (state->start == state->end) salut_bio_release(state);
    return (int)count;
}
static long salut_bio_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number;
    salut_bio_state *state = (salut_bio_state *)BIO_get_data(bio);
    switch (command) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_PENDING: return state ? (long)(state->end - state->start) : 0;
    case BIO_C_GET_FD:
        if (!state) return -1;
        if (pointer) *(int *)pointer = state->fd;
        return (long)state->fd;
    default: return 0;
    }
}
static int salut_bio_destroy(BIO *bio) {
    salut_bio_state *state = (salut_bio_state *)BIO_get_data(bio);
    if (state) {
        salut_bio_release(state);
        OPENSSL_free(state);
    }
    BIO_set_data(bio, NULL);
    return 1;
}
static inline BIO_METHOD **salut_bio_method_slot(void) {
    static BIO_METHOD *method;   // a function's static: Swift's importer emits it with the function
    return &method;
}
static void salut_bio_method_make(void) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "salut socket");
    if (method && BIO_meth_set_write(method, salut_bio_write) == 1 && BIO_meth_set_read(method, salut_bio_read) == 1
        && BIO_meth_set_ctrl(method, salut_bio_ctrl) == 1 && BIO_meth_set_destroy(method, salut_bio_destroy) == 1) {
        *salut_bio_method_slot() = method;
    } else if (method) {
        BIO_meth_free(method);
    }
}
/// A BIO over `fd` that never raises SIGPIPE and reads ahead; NULL when OpenSSL cannot make one.
static inline BIO *salut_BIO_new_socket_nosigpipe(int fd) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (pthread_once(&once, salut_bio_method_make) != 0 || !*salut_bio_method_slot()) return NULL;
    salut_bio_state *state = (salut_bio_state *)OPENSSL_zalloc(sizeof(salut_bio_state));
    if (!state) return NULL;
    state->fd = fd;
    BIO *bio = BIO_new(*salut_bio_method_slot());
    if (!bio) {
        OPENSSL_free(state);
        return NULL;
    }
    BIO_set_data(bio, state);
    BIO_set_init(bio, 1);
    return bio;
}
// The three functions below take a BIO made by salut_BIO_new_socket_nosigpipe.
/// Bytes `bio` read from its socket that OpenSSL has not taken.
static inline size_t salut_BIO_unread_count(BIO *bio) {
    salut_bio_state *state = (salut_bio_state *)BIO_get_data(bio);
    return state ? state->end - state->start : 0;
}
/// Moves up to `capacity` of those bytes to `out`; returns how many.
static inline size_t salut_BIO_take_unread(BIO *bio, void *out, size_t capacity) {
    salut_bio_state *state = (salut_bio_state *)BIO_get_data(bio);
    if (!state || state->start == state->end) return 0;
    size_t count = state->end - state->start;
    if (count > capacity) count = capacity;
    memcpy(out, state->bytes + state->start, count);
    state->start += count;
    if (state->start == state->end) salut_bio_release(state);
    return count;
}
/// Makes `count` bytes, read from the socket before, the first that `bio` reads, on a BIO that
/// has read nothing yet; 1 when done, 0 when they do not fit (over SALUT_BIO_READ_AHEAD) or
/// there is no memory.
static inline int salut_BIO_preload(BIO *bio, const void *bytes, size_t count) {
    salut_bio_state *state = (salut_bio_state *)BIO_get_data(bio);
    if (count == 0) return 1;
    if (!state || state->start != state->end || count > SALUT_BIO_READ_AHEAD) return 0;
    state->bytes = (unsigned char *)OPENSSL_malloc(SALUT_BIO_READ_AHEAD);
    if (!state->bytes) return 0;
    memcpy(state->bytes, bytes, count);
    state->start = 0;
    state->end = count;
    return 1;
}
// SSL_OP_* are built with a function-like macro, which Swift does not import.
static const uint64_t salut_SSL_OP_NO_RENEGOTIATION = SSL_OP_NO_RENEGOTIATION;
static const uint64_t salut_SSL_OP_CIPHER_SERVER_PREFERENCE = SSL_OP_CIPHER_SERVER_PREFERENCE;
#endif
