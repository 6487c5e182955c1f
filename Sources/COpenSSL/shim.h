// The OpenSSL headers Salut uses. Nothing but includes belongs here.
#ifndef SALUT_COPENSSL_SHIM_H
#define SALUT_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/sha.h>
#endif
