package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// ScreenshotEnv names a path the status page test copies its screenshot
// to (docs/status-page.png is made this way).
const ScreenshotEnv = "CKF_STATUS_SCREENSHOT"

// chromium returns the headless browser binary, or skips the test.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("status page: no Chromium on PATH (Debian: apt-get install chromium); skipping the headless render")
	return ""
}

// headless runs Chromium headless with extra args against url.
func headless(t *testing.T, bin, url string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--window-size=1200,820"}
	cmd := exec.CommandContext(ctx, bin, append(append(base, args...), url)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

func TestStatusPageRendersTheLaneTableInChromium(t *testing.T) {
	bin := chromium(t)
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	ix := startIndexer(t, nc, js, indexerConfig(t, nil))
	startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a", nil))
	startRelay(t, nc, js, relayConfig(t, "dc-b", "relay-b", nil))
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 400, 3)
	w.publish(t, js, 400)
	w.converge(t, ix)

	web := httptest.NewServer(queryapi.Handler(ix, ix.APIMetrics(), ix.Metrics(), queryapi.WithStatusInfo(queryapi.StatusInfo{Domain: domain, Version: cli.Version()})))
	defer web.Close()
	for i := range 50 {
		body := fmt.Sprintf(`{"local_hashes":[%d,%d]}`, i, i+1)
		resp, err := http.Post(web.URL+"/v1/match", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	dom := headless(t, bin, web.URL+"/", "--dump-dom")
	rows := laneRows(t, dom)
	if len(rows) != 2 {
		t.Fatalf("lane table has %d rows, want dc-a and dc-b:\n%s", len(rows), dom)
	}
	byDC := map[string]api.LaneStatus{}
	for _, l := range ix.Lanes() {
		byDC[l.DC] = l
	}
	for _, r := range rows {
		// domain, lane, dc, state, epoch, installed seq, stream lag, last fault
		if r[0] != domain {
			t.Fatalf("row %q: domain, want %q", r, domain)
		}
		r = r[1:]
		l, ok := byDC[r[1]]
		if !ok || r[0] != strconv.Itoa(l.Lane) || r[2] != "active" || r[6] != "" {
			t.Fatalf("row %q does not match lane %+v", r, l)
		}
		if epoch, _ := strconv.ParseUint(r[3], 10, 64); epoch == 0 || epoch != l.Epoch {
			t.Fatalf("row %q: epoch, want %d", r, l.Epoch)
		}
		if seq, _ := strconv.ParseUint(r[4], 10, 64); seq == 0 || seq > l.InstalledSequence {
			t.Fatalf("row %q: installed sequence, lane now at %d", r, l.InstalledSequence)
		}
		if _, err := strconv.ParseUint(r[5], 10, 64); err != nil {
			t.Fatalf("row %q: stream lag %v", r, err)
		}
	}
	if !bytes.Contains(dom, []byte(`<td class="num">50</td>`)) {
		t.Fatalf("latency table lacks the 50 matches:\n%s", dom)
	}

	shot := filepath.Join(t.TempDir(), "status.png")
	headless(t, bin, web.URL+"/", "--screenshot="+shot)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Fatalf("screenshot: %d bytes, %v", len(png), err)
	}
	if dst := os.Getenv(ScreenshotEnv); dst != "" {
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", dst)
	}
}

// laneRows returns the cell texts of the rows of table#lanes's body.
func laneRows(t *testing.T, dom []byte) [][]string {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	var table *html.Node
	var find func(n *html.Node)
	find = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "table" && attr(n, "id") == "lanes" {
			table = n
		}
		for c := n.FirstChild; c != nil && table == nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	if table == nil {
		t.Fatalf("no table#lanes:\n%s", dom)
	}
	var rows [][]string
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "tr" && n.Parent != nil && n.Parent.Data == "tbody" {
			var cells []string
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.ElementNode && c.Data == "td" {
					cells = append(cells, strings.TrimSpace(text(c)))
				}
			}
			rows = append(rows, cells)
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(table)
	return rows
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func text(n *html.Node) string {
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(text(c))
	}
	return b.String()
}
