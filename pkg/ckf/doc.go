// Package ckf is the shared vocabulary of ckfrelay: identities, the CKF format
// identity, constants, token and sequence hashing, bucket addressing, packed
// bucket operations, the shared producer→consumer messages and the failure
// disposition table.
//
// Everything here is pure and allocation-conscious; nothing imports NATS.
// Semantics follow dynamo-kv-router 1.4.0 as described in CKF-SPEC.md.
package ckf
