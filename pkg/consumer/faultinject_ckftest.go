//go:build ckftest

package consumer

// CrashLaneWorkerForTest makes the worker that lane (0..15) routes to panic
// on its next command, exactly as a bug in an ingestor would: the pool
// recovers the panic, retires the worker's lanes, reports FaultWorkerFailed
// and fails closed. It blocks while that worker's queue is full. It exists
// only in builds with the ckftest tag, for other packages' fault tests.
func CrashLaneWorkerForTest(p *Pool, lane int) { p.crashLaneWorker(lane) }
