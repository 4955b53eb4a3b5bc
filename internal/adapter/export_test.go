package adapter

// Test hooks: they reach unexported sink state only; none is public API.

// ErrInjectedDeliveryFailure is the sink error of FailNextDeltaDelivery.
var ErrInjectedDeliveryFailure = errInjectedDeliveryFailure

// FailNextDeltaDelivery makes the next delta hand-off fail with
// ErrInjectedDeliveryFailure (the delta is not submitted).
func (a *LocalAdapter) FailNextDeltaDelivery() { a.sink.failNext = true }

// DropNextDeltaDelivery makes the next delta hand-off report success without
// submitting the delta, as a lost message would.
func (a *LocalAdapter) DropNextDeltaDelivery() { a.sink.dropNext = true }

// DeliveryFaultPending reports whether an injected fault is still armed.
func (a *LocalAdapter) DeliveryFaultPending() bool { return a.sink.failNext || a.sink.dropNext }
