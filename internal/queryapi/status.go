package queryapi

import (
	"bytes"
	_ "embed"
	"html/template"
	"net/http"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
)

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Parse(statusHTML))

// LatencyStats summarises match latency for the status page.
type LatencyStats struct {
	Count    uint64
	P50, P99 time.Duration
}

// statusPage is what status.html renders.
type statusPage struct {
	Domain     string
	Version    string
	Now        string
	ReadyLanes int
	Lanes      []api.LaneStatus
	Latency    struct {
		Count    uint64
		P50, P99 string
	}
}

// StatusInfo names the indexer on its status page.
type StatusInfo struct {
	Domain  string
	Version string
}

// statusHandler renders the status page: plain HTML from an embedded
// template (no build step, no assets), the lanes, the query latency and a
// form posting to /v1/match.
func statusHandler(b Backend, m *Metrics, info StatusInfo, now func() time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		p := statusPage{Domain: info.Domain, Version: info.Version, Now: now().UTC().Format(time.DateTime + " MST"), Lanes: b.Lanes()}
		for _, l := range p.Lanes {
			if l.State == "active" {
				p.ReadyLanes++
			}
		}
		lat := m.MatchLatency()
		p.Latency.Count = lat.Count
		p.Latency.P50, p.Latency.P99 = fmtLatency(lat.Count, lat.P50), fmtLatency(lat.Count, lat.P99)
		var buf bytes.Buffer
		if err := statusTemplate.Execute(&buf, p); err != nil {
			http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(buf.Bytes())
	}
}

func fmtLatency(n uint64, d time.Duration) string {
	if n == 0 {
		return "–"
	}
	return d.String()
}
