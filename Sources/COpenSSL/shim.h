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
// A socket BIO that sends with MSG_NOSIGNAL: OpenSSL's own socket BIO writes with write(2),
// which raises SIGPIPE (and by default ends the process) when the peer has gone. The descriptor
// is kept in the BIO's data pointer; the BIO never closes it.
static int salut_bio_write(BIO *bio, const char *data, int length) {
    int fd = (int)(intptr_t)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    ssize_t n = send(fd, data, (size_t)length, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(bio);
    return (int)n;
}
static int salut_bio_read(BIO *bio, char *data, int length) {
    int fd = (int)(intptr_t)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    ssize_t n = recv(fd, data, (size_t)length, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(bio);
    return (int)n;
}
static long salut_bio_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number;
    switch (command) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_C_GET_FD:
        if (pointer) *(int *)pointer = (int)(intptr_t)BIO_get_data(bio);
        return (long)(intptr_t)BIO_get_data(bio);
    default: return 0;
    }
}
static inline BIO_METHOD **salut_bio_method_slot(void) {
    static BIO_METHOD *method;   // a function's static: Swift's importer emits it with the function
    return &method;
}
static void salut_bio_method_make(void) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "salut socket");
    if (method && BIO_meth_set_write(method, salut_bio_write) == 1 && BIO_meth_set_read(method, salut_bio_read) == 1
        && BIO_meth_set_ctrl(method, salut_bio_ctrl) == 1) {
        *salut_bio_method_slot() = method;
    } else if (method) {
        BIO_meth_free(method);
    }
}
/// A BIO over `fd` that never raises SIGPIPE; NULL when OpenSSL cannot make one.
static inline BIO *salut_BIO_new_socket_nosigpipe(int fd) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (pthread_once(&once, salut_bio_method_make) != 0 || !*salut_bio_method_slot()) return NULL;
    BIO *bio = BIO_new(*salut_bio_method_slot());
    if (!bio) return NULL;
    BIO_set_data(bio, (void *)(intptr_t)fd);
    BIO_set_init(bio, 1);
    return bio;
}
// SSL_OP_* are built with a function-like macro, which Swift does not import.
static const uint64_t salut_SSL_OP_NO_RENEGOTIATION = SSL_OP_NO_RENEGOTIATION;
static const uint64_t salut_SSL_OP_CIPHER_SERVER_PREFERENCE = SSL_OP_CIPHER_SERVER_PREFERENCE;
#endif
