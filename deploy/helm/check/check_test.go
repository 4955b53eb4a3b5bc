package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const chartDir = "../ckfrelay"

// docImage is the image repository docs/kubernetes.md names.
const docImage = "registry.example.com/ckfrelay"

// bins are the chart's programs, built once for every test.
var bins *Binaries

func TestMain(m *testing.M) {
	code, err := func() (int, error) {
		repo, err := FindRepo(".")
		if err != nil {
			return 0, err
		}
		tmp, err := os.MkdirTemp("", "chartcheck-bin-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(tmp)
		if bins, err = NewBinaries(context.Background(), repo, tmp, ChartPrograms); err != nil {
			return 0, err
		}
		return m.Run(), nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

// Every example renders a self-contained release that passes every check,
// and the examples cover a DC site, the router site and the secured form.
func TestEveryCIExamplePasses(t *testing.T) {
	files, err := CIValues(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	sites := map[string]bool{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r, err := RenderFile(chartDir, f, "ckf", "ckfrelay")
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckRendered(context.Background(), r, bins, true); err != nil {
				t.Fatal(err)
			}
			site, _ := r.Values["site"].(string)
			sites[site] = true
			if auth, _ := r.Values["auth"].(map[string]any); auth != nil {
				for _, a := range auth {
					if a.(map[string]any)["type"] != "none" {
						sites["secure"] = true
					}
				}
			}
		})
	}
	for _, want := range []string{"dc", "router", "secure"} {
		if !sites[want] {
			t.Errorf("no ci/ example of the %s form", want)
		}
	}
}

// render renders the chart with the DC example's values plus overlay.
func render(t *testing.T, base, overlay string) *Rendered {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "ci", base))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Render(chartDir, mergeYAML(t, b, []byte(overlay)), "ckf", "ckfrelay")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A values file that breaks one rule is refused by the check, and says why.
func TestBrokenValuesFail(t *testing.T) {
	for name, tc := range map[string]struct {
		base, overlay, want string
	}{
		"unknown relay flag":          {"dc-a-values.yaml", "relay: {extraArgs: [--no-such-flag=1]}", "flag provided but not defined: -no-such-flag"},
		"bad duration":                {"dc-a-values.yaml", "relay: {leaseTTL: 3 seconds}", "lease-ttl"},
		"pools file refused":          {"dc-a-values.yaml", "relay: {pools: {pools: [{domain: demo}, {domain: demo}]}}", "pools-file"},
		"pools file unknown key":      {"dc-a-values.yaml", "relay: {pools: {pols: []}}", "pools-file"},
		"bad engine":                  {"dc-a-values.yaml", "bridge: {engines: [{workerId: x, pub: nowhere}]}", "engine-bridge"},
		"bad dc-rtt":                  {"router-values.yaml", "indexer: {route: {dcRTT: {dc-a: fast}}}", "dc-rtt"},
		"bad route policy":            {"router-values.yaml", "indexer: {route: {policy: cheapest}}", "route-policy"},
		"external secret in ci":       {"dc-b-secure-values.yaml", "auth: {relay: {existingSecret: relay-creds}}", `Secret "relay-creds" made outside the release`},
		"creds instead of a password": {"router-secure-values.yaml", "auth: {indexer: {type: creds, key: indexer.creds}}", ""},
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, tc.base, tc.overlay)
			err := CheckRendered(context.Background(), r, bins, true)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want a pass, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A Secret declared external in values passes where the release need not
// be self-contained; one that is neither rendered nor declared fails.
func TestExternalSecrets(t *testing.T) {
	r := render(t, "dc-b-secure-values.yaml", "auth: {relay: {existingSecret: relay-creds}}")
	if err := CheckRendered(context.Background(), r, bins, false); err != nil {
		t.Fatalf("declared external: %v", err)
	}
	objs := decode(t, r)
	for _, o := range objs {
		if st, ok := o.Obj.(*appsv1.StatefulSet); ok {
			for i, v := range st.Spec.Template.Spec.Volumes {
				if v.Secret != nil {
					st.Spec.Template.Spec.Volumes[i].Secret.SecretName = "undeclared"
				}
			}
		}
	}
	err := Check(context.Background(), objs, bins, Options{External: ExternalRefs(r.Values), ImageRepository: "ckfrelay"})
	if err == nil || !strings.Contains(err.Error(), `Secret "undeclared", neither rendered nor declared external`) {
		t.Fatalf("got %v", err)
	}
}

func decode(t *testing.T, r *Rendered) []Object {
	t.Helper()
	objs, err := DecodeAll(r.Manifests)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// Changes to a rendered release that no values file makes: each is found.
func TestBrokenObjectsFail(t *testing.T) {
	container := func(objs []Object, prog string) *corev1.Container {
		for _, p := range pods(objs) {
			for i := range p.spec.Containers {
				if len(p.spec.Containers[i].Command) > 0 && p.spec.Containers[i].Command[0] == "/"+prog {
					return &p.spec.Containers[i]
				}
			}
		}
		t.Fatalf("no %s container", prog)
		return nil
	}
	setArg := func(c *corev1.Container, flag, value string) {
		for i, a := range c.Args {
			if strings.HasPrefix(a, flag+"=") {
				c.Args[i] = flag + "=" + value
				return
			}
		}
		t.Fatalf("no %s", flag)
	}
	for name, tc := range map[string]struct {
		base   string
		breaks func([]Object)
		want   string
	}{
		"probe path not served": {"dc-a-values.yaml", func(o []Object) {
			container(o, "relay-producer").LivenessProbe.HTTPGet.Path = "/health"
		}, `liveness probe path "/health" is not served by relay-producer`},
		"indexer path of the relay": {"dc-a-values.yaml", func(o []Object) {
			container(o, "relay-producer").ReadinessProbe.HTTPGet.Path = "/v1/lanes"
		}, `"/v1/lanes" is not served by relay-producer`},
		"probe on another port": {"router-values.yaml", func(o []Object) {
			setArg(container(o, "global-indexer"), "--http-addr", "0.0.0.0:8081")
		}, "listens on 0.0.0.0:8081"},
		"loopback listener": {"router-values.yaml", func(o []Object) {
			setArg(container(o, "global-indexer"), "--http-addr", "127.0.0.1:8080")
		}, "listens on loopback"},
		"writable root": {"router-values.yaml", func(o []Object) {
			f := false
			container(o, "global-indexer").SecurityContext.ReadOnlyRootFilesystem = &f
		}, "root filesystem is not read-only"},
		"capabilities kept": {"dc-a-values.yaml", func(o []Object) {
			container(o, "engine-bridge").SecurityContext.Capabilities.Drop = nil
		}, "does not drop ALL capabilities"},
		"program not in the image": {"dc-a-values.yaml", func(o []Object) {
			container(o, "engine-bridge").Command = []string{"/bin/sh"}
		}, "/bin/sh is not a program of the image"},
		"service selects nothing": {"router-values.yaml", func(o []Object) {
			for _, x := range o {
				if s, ok := x.Obj.(*corev1.Service); ok {
					s.Spec.Selector["app.kubernetes.io/component"] = "indexr"
				}
			}
		}, "selects no pod of the release"},
		"unrendered configmap": {"dc-a-values.yaml", func(o []Object) {
			for _, x := range o {
				if st, ok := x.Obj.(*appsv1.StatefulSet); ok {
					st.Spec.Template.Spec.Volumes[0].ConfigMap.Name = "pools-elsewhere"
				}
			}
		}, `ConfigMap "pools-elsewhere", neither rendered nor declared external`},
		"env var expands to a bad flag": {"dc-a-values.yaml", func(o []Object) {
			c := container(o, "relay-producer")
			c.Env = append(c.Env, corev1.EnvVar{Name: "CKFRELAY_SEED", Value: "soon"})
		}, "CKFRELAY_SEED"},
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, tc.base, "")
			objs := decode(t, r)
			if err := Check(context.Background(), objs, bins, Options{SelfContained: true, ImageRepository: "ckfrelay"}); err != nil {
				t.Fatalf("before the change: %v", err)
			}
			tc.breaks(objs)
			err := Check(context.Background(), objs, bins, Options{SelfContained: true, ImageRepository: "ckfrelay"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Documents are decoded as strictly as the API server reads them.
func TestStrictDecoding(t *testing.T) {
	r := render(t, "router-values.yaml", "")
	var dep Manifest
	for _, m := range r.Manifests {
		if strings.Contains(m.Text, "kind: Deployment") {
			dep = m
		}
	}
	if _, err := Decode(dep); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ from, to, want string }{
		"unknown field":     {"imagePullPolicy:", "imagePulPolicy:", `unknown field "spec.template.spec.containers[0].imagePulPolicy"`},
		"field name's case": {"imagePullPolicy:", "ImagePullPolicy:", "ImagePullPolicy"},
		"wrong type":        {"replicas: 3", "replicas: three", "replicas"},
		"bad quantity":      {"memory: 256Mi", "memory: lots", "quantities must match"},
		"duplicate key":     {"  replicas: 3\n", "  replicas: 3\n  replicas: 4\n", "replicas"},
		"unknown kind":      {"kind: Deployment", "kind: Deploymnt", "unknown apiVersion/kind"},
		"bad name":          {"name: ckf-ckfrelay-indexer", "name: Ckf_Indexer", "metadata.name"},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(dep.Text, tc.from) {
				t.Fatalf("%q not in the Deployment", tc.from)
			}
			_, err := Decode(Manifest{Source: dep.Source, Text: strings.Replace(dep.Text, tc.from, tc.to, 1)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The chart refuses what it must never render.
func TestChartRefuses(t *testing.T) {
	for name, overlay := range map[string]string{
		"latest":         "image: {tag: latest}",
		"no tag":         `image: {tag: ""}`,
		"unknown site":   "site: edge",
		"too many R":     "nats: {jsReplicas: 7}",
		"auth type":      "auth: {relay: {type: token}}",
		"bridge no engs": "bridge: {enabled: true, engines: []}",
	} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(chartDir, "ci", "dc-a-values.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Render(chartDir, mergeYAML(t, b, []byte(overlay)), "ckf", "ckfrelay"); err == nil {
				t.Fatal("rendered")
			}
		})
	}
}

// The chart's dashboard is the one deploy/grafana provisions.
func TestDashboardIsTheRepositorysOne(t *testing.T) {
	repo, err := FindRepo(".")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(repo, "deploy/grafana/dashboards/ckfrelay.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(chartDir, "files/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/helm/ckfrelay/files/dashboard.json differs from deploy/grafana/dashboards/ckfrelay.json: copy it")
	}
}

// docManifests are the Kubernetes objects of a Markdown file's yaml
// blocks (those with an apiVersion).
func docManifests(t *testing.T, text string) []Manifest {
	t.Helper()
	var out []Manifest
	re := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	for i, m := range re.FindAllStringSubmatch(text, -1) {
		if !strings.Contains(m[1], "apiVersion:") {
			continue
		}
		for j, doc := range splitDocuments(m[1]) {
			out = append(out, Manifest{Source: fmt.Sprintf("docs/kubernetes.md block %d#%d", i, j), Text: doc})
		}
	}
	return out
}

// The manifests docs/kubernetes.md shows (the engine-bridge sidecar beside
// a vLLM pod) pass the same checks; one with a broken flag does not.
func TestDocsManifests(t *testing.T) {
	repo, err := FindRepo(".")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(repo, "docs/kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(text string) error {
		ms := docManifests(t, text)
		if len(ms) == 0 {
			t.Fatal("docs/kubernetes.md shows no manifest")
		}
		objs, err := DecodeAll(ms)
		if err != nil {
			return err
		}
		if len(Programs(objs, docImage)) == 0 {
			t.Fatal("docs/kubernetes.md's manifests run no ckfrelay program")
		}
		return Check(context.Background(), objs, bins, Options{ImageRepository: docImage})
	}
	if err := check(string(b)); err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(b), "- --engine=", "- --engines=", 1)
	if err := check(broken); err == nil || !errors.Is(err, ErrArgs) {
		t.Fatalf("a doc with --engines: %v", err)
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"POD_NAME": "relay-0"}
	for in, want := range map[string]string{
		"--instance=$(POD_NAME)": "--instance=relay-0",
		"$(UNSET)":               "$(UNSET)",
		"$$(POD_NAME)":           "$(POD_NAME)",
		"a$b":                    "a$b",
		"$(POD_NAME":             "$(POD_NAME",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
