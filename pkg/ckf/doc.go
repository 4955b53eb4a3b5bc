// Package ckf holds the identities and pure arithmetic of ckfrelay: the CKF format
// identity, constants, token and sequence hashing, bucket addressing, packed
// bucket operations, the shared producer→consumer messages and the failure
// disposition table.
//
// Everything here is pure and allocation-conscious; nothing imports NATS.
// Semantics follow dynamo-kv-router 1.4.0 as described in docs/ckf-spec.md.
package ckf
