package testenv

import (
	"compress/gzip"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is an in-process OTLP/HTTP trace collector: it decodes every
// protobuf ExportTraceServiceRequest POSTed to /v1/traces and keeps the
// spans with their resource attributes.
type OTLPReceiver struct {
	// URL is the base URL (http:// or https://); exporters post to
	// URL+"/v1/traces".
	URL string
	// CAFile is a PEM file holding the TLS server's certificate (empty
	// without TLS).
	CAFile string

	mu    sync.Mutex
	spans []ReceivedSpan
	bad   int
}

// ReceivedSpan is one exported span and the resource it came with.
type ReceivedSpan struct {
	Span     *tracepb.Span
	Resource map[string]string
}

// StartOTLPReceiver serves a receiver on a random port (over TLS when
// withTLS) until the test ends.
func StartOTLPReceiver(t testing.TB, withTLS bool) *OTLPReceiver {
	t.Helper()
	rcv := &OTLPReceiver{}
	h := http.HandlerFunc(rcv.serve)
	var srv *httptest.Server
	if withTLS {
		srv = httptest.NewTLSServer(h)
		rcv.CAFile = filepath.Join(t.TempDir(), "otlp-ca.pem")
		cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		if err := os.WriteFile(rcv.CAFile, cert, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := x509.ParseCertificate(srv.Certificate().Raw); err != nil {
			t.Fatal(err)
		}
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	rcv.URL = srv.URL
	return rcv
}

func (r *OTLPReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.reject()
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.reject()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(io.LimitReader(body, 64<<20))
	var msg collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &msg)
	}
	if err != nil || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.reject()
		http.Error(w, "want an application/x-protobuf ExportTraceServiceRequest", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, ReceivedSpan{Span: s, Resource: res})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *OTLPReceiver) reject() {
	r.mu.Lock()
	r.bad++
	r.mu.Unlock()
}

// Spans returns a copy of the spans received so far.
func (r *OTLPReceiver) Spans() []ReceivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ReceivedSpan(nil), r.spans...)
}

// Rejected counts requests that were not a decodable export.
func (r *OTLPReceiver) Rejected() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad
}

// attrs flattens attributes to strings (strings, ints and bools as Go
// formats them, others in their protobuf text form).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = strconv.FormatBool(v.BoolValue)
		default:
			out[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return out
}

// Attr returns the string form of a span attribute ("" when absent).
func Attr(s *tracepb.Span, key string) string {
	return attrs(s.GetAttributes())[key]
}
