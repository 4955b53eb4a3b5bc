// Package wanproxy is a TCP fault proxy standing in for the WAN between a
// DC's NATS leaf node and the hub cluster (cmd/ckf-wanproxy; why not
// toxiproxy: docs/chaos.md).
//
// A Link is one DC's WAN link: one or more routes (a listen address
// forwarding every accepted connection to its target, e.g. one per hub
// node) sharing one set of toxics, changed at run time through the HTTP
// control API (NewHandler):
//
//   - latency with jitter, per direction: every chunk read from one side is
//     written to the other Delay ± Jitter (uniform) after it was read, never
//     before an earlier chunk of the same stream (TCP does not reorder);
//   - a bandwidth cap in bytes/s, per direction, shared by every connection
//     of the link (the link is the bottleneck, not each flow);
//   - reset: every open connection is closed with a TCP RST on both sides;
//   - stall: nothing is forwarded, nothing is closed (a black hole: peers
//     notice only through their own timeouts); with a timeout, connections
//     still stalled after it are closed;
//   - cut: every open connection is closed and new ones are refused (reset
//     on accept) until heal; heal ends a cut and a stall, and stalled bytes
//     then flow on.
//
// Up is the direction from the connecting side (the leaf) to the target
// (the hub), Down the reverse; a round trip crosses both.
package wanproxy
