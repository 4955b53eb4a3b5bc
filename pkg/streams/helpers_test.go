package streams

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

func spanContextFrom(ctx context.Context) trace.SpanContext {
	return trace.SpanContextFromContext(ctx)
}
