// Command check renders the ckfrelay Helm chart for every example values
// file of its ci/ folder with Helm's own Go library, decodes every document
// strictly into its k8s.io/api type, and checks the release as a cluster
// would find it: each container's arguments parsed by the ckfrelay program
// it runs (--check-config), each probe on a path and port that program
// serves, each Secret and ConfigMap a pod uses in the release, each
// selector selecting something. It is its own module, so the binaries'
// go.mod holds only what they need.
//
//	cd deploy/helm/check && go run .          # the chart next to it
//	go run . -chart DIR -values FILE          # one values file
//	go run . -values FILE -render             # print the release, check nothing
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	chartDir := flag.String("chart", "../ckfrelay", "chart directory")
	values := flag.String("values", "", "one values file (default: every ci/*-values.yaml of the chart, each self-contained)")
	render := flag.Bool("render", false, "print the documents -values renders (as helm template does) and check nothing")
	flag.Parse()
	if *render {
		r, err := RenderFile(*chartDir, *values, "ckf", "ckfrelay")
		if err != nil {
			fmt.Fprintln(os.Stderr, "check:", err)
			os.Exit(1)
		}
		for _, m := range r.Manifests {
			fmt.Printf("---\n# %s\n%s\n", m.Source, strings.TrimSpace(m.Text))
		}
		return
	}
	passed, failed, err := run(context.Background(), *chartDir, *values)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		os.Exit(2)
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

func run(ctx context.Context, chartDir, values string) (passed, failed int, err error) {
	files := []string{values}
	selfContained := values == ""
	if selfContained {
		if files, err = CIValues(chartDir); err != nil {
			return 0, 0, err
		}
	}
	repo, err := FindRepo(chartDir)
	if err != nil {
		return 0, 0, err
	}
	tmp, err := os.MkdirTemp("", "chartcheck-bin-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(tmp)
	bins, err := NewBinaries(ctx, repo, tmp, ChartPrograms)
	if err != nil {
		return 0, 0, err
	}
	for _, f := range files {
		if err := CheckValuesFile(ctx, chartDir, f, bins, selfContained); err != nil {
			fmt.Printf("FAIL %s\n%s\n", f, indent(err.Error()))
			failed++
			continue
		}
		fmt.Printf("ok   %s\n", f)
		passed++
	}
	return passed, failed, nil
}

// ChartPrograms are the programs the chart runs.
var ChartPrograms = []string{"engine-bridge", "global-indexer", "relay-producer"}

// CIValues are the chart's example values files (chart-testing's ci/
// convention).
func CIValues(chartDir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no ci/*-values.yaml", chartDir)
	}
	sort.Strings(files)
	return files, nil
}

// CheckValuesFile renders, decodes and checks one release.
func CheckValuesFile(ctx context.Context, chartDir, file string, bins *Binaries, selfContained bool) error {
	r, err := RenderFile(chartDir, file, "ckf", "ckfrelay")
	if err != nil {
		return err
	}
	return CheckRendered(ctx, r, bins, selfContained)
}

// CheckRendered decodes and checks a rendered release.
func CheckRendered(ctx context.Context, r *Rendered, bins *Binaries, selfContained bool) error {
	objs, err := DecodeAll(r.Manifests)
	if err != nil {
		return err
	}
	repo := ""
	if img, ok := r.Values["image"].(map[string]any); ok {
		repo, _ = img["repository"].(string)
	}
	return Check(ctx, objs, bins, Options{SelfContained: selfContained, External: ExternalRefs(r.Values), ImageRepository: repo})
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
