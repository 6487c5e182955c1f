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
// SSL_OP_* are built with a function-like macro, which Swift does not import.
static const uint64_t salut_SSL_OP_IGNORE_UNEXPECTED_EOF = SSL_OP_IGNORE_UNEXPECTED_EOF;
static const uint64_t salut_SSL_OP_NO_RENEGOTIATION = SSL_OP_NO_RENEGOTIATION;
#endif
