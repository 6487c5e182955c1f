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
// SSL_OP_* are built with a function-like macro, which Swift does not import.
static const uint64_t salut_SSL_OP_NO_RENEGOTIATION = SSL_OP_NO_RENEGOTIATION;
#endif
