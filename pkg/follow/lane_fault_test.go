package follow

import (
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/consumer"
)

// A worker failure queued before the pool was replaced names the lane's
// fault; pool_rebuilt is only for lanes the rebuild retired.
func TestQueuedWorkerFailureOutranksThePoolRebuild(t *testing.T) {
	old, g := &poolGen{replaced: make(chan struct{})}, &poolGen{replaced: make(chan struct{})}
	r := &laneRunner{faults: make(chan genFault, 4)}
	r.faults <- genFault{gen: old, fault: consumer.Fault{Kind: consumer.FaultWorkerFailed}}
	r.faults <- genFault{gen: g, fault: consumer.Fault{Kind: consumer.FaultWorkerFailed, Worker: 1}}
	out := r.pendingFault(g)
	if out.fault != consumer.FaultWorkerFailed.String() || out.requestSnapshot {
		t.Fatalf("outcome %+v, want worker_failed without a snapshot request", out)
	}
	if len(r.faults) != 0 {
		t.Fatalf("%d faults left queued", len(r.faults))
	}
	// Nothing queued (or only faults of earlier pools): the rebuild.
	r.faults <- genFault{gen: old, fault: consumer.Fault{Kind: consumer.FaultWorkerFailed}}
	if out := r.pendingFault(g); out.fault != faultPoolRebuilt || out.requestSnapshot {
		t.Fatalf("outcome %+v, want %s without a snapshot request", out, faultPoolRebuilt)
	}
}
