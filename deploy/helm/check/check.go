package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Options say what a release may leave to its namespace.
type Options struct {
	// SelfContained: every Secret and ConfigMap a pod uses must be in the
	// release (chart-testing installs each example into an empty
	// namespace).
	SelfContained bool
	// External are the Secrets and ConfigMaps the values declare made
	// elsewhere (ExternalRefs).
	External map[string]bool
	// ImageRepository marks the containers that run ckfrelay programs.
	ImageRepository string
}

// ExternalRefs are the names under every existingSecret and
// existingConfigMap key of the values: the chart's way of declaring an
// object it mounts but does not render.
func ExternalRefs(values map[string]any) map[string]bool {
	out := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, c := range t {
				if s, ok := c.(string); ok && s != "" && (k == "existingSecret" || k == "existingConfigMap") {
					out[s] = true
				}
				walk(c)
			}
		case []any:
			for _, c := range t {
				walk(c)
			}
		}
	}
	walk(values)
	return out
}

// podOf is a pod template of the release, or a bare Pod.
type podOf struct {
	owner  Object
	labels map[string]string
	spec   *corev1.PodSpec
}

func pods(objs []Object) []podOf {
	var out []podOf
	for _, o := range objs {
		switch t := o.Obj.(type) {
		case *appsv1.Deployment:
			out = append(out, podOf{o, t.Spec.Template.Labels, &t.Spec.Template.Spec})
		case *appsv1.StatefulSet:
			out = append(out, podOf{o, t.Spec.Template.Labels, &t.Spec.Template.Spec})
		case *corev1.Pod:
			out = append(out, podOf{o, t.Labels, &t.Spec})
		}
	}
	return out
}

// Programs are the ckfrelay programs the release's containers run.
func Programs(objs []Object, repository string) []string {
	set := map[string]bool{}
	for _, p := range pods(objs) {
		for _, c := range allContainers(p.spec) {
			if isOurs(c.Image, repository) && len(c.Command) > 0 {
				set[strings.TrimPrefix(c.Command[0], "/")] = true
			}
		}
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func allContainers(s *corev1.PodSpec) []corev1.Container {
	return append(append([]corev1.Container{}, s.InitContainers...), s.Containers...)
}

func isOurs(image, repository string) bool {
	repo, _ := splitImage(image)
	return repo == repository
}

// splitImage splits repository[:tag] (a registry port is not a tag).
func splitImage(image string) (repo, tag string) {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, ""
}

// checker gathers the violations of one release.
type checker struct {
	ctx  context.Context
	objs []Object
	bins *Binaries
	opt  Options
	errs []error
	tmp  string
}

func (c *checker) fail(o Object, format string, a ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s (%s): %s", o.Name(), o.Source, fmt.Sprintf(format, a...)))
}

// Check runs the semantic checks over a decoded release: every container's
// arguments parse with its program's flags, every probe names a path and
// port its program serves, every Secret and ConfigMap a pod uses exists,
// every selector selects something, and the hardening the chart promises.
func Check(ctx context.Context, objs []Object, bins *Binaries, opt Options) error {
	tmp, err := os.MkdirTemp("", "chartcheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	c := &checker{ctx: ctx, objs: objs, bins: bins, opt: opt, tmp: tmp}
	seen := map[string]bool{}
	for _, o := range objs {
		key := o.Kind + "/" + o.Meta.Name
		if seen[key] {
			c.fail(o, "rendered twice")
		}
		seen[key] = true
	}
	for i, p := range pods(objs) {
		c.pod(i, p)
	}
	for _, o := range objs {
		switch t := o.Obj.(type) {
		case *appsv1.Deployment:
			c.workloadSelector(o, t.Spec.Selector, t.Spec.Template.Labels)
		case *appsv1.StatefulSet:
			c.workloadSelector(o, t.Spec.Selector, t.Spec.Template.Labels)
			if c.find("Service", t.Spec.ServiceName) == nil {
				c.fail(o, "serviceName %q is not a Service of the release", t.Spec.ServiceName)
			}
		case *corev1.Service:
			c.service(o, t)
		case *policyv1.PodDisruptionBudget:
			c.selectsPod(o, t.Spec.Selector)
		case *networkingv1.NetworkPolicy:
			c.selectsPod(o, &t.Spec.PodSelector)
		case *monitoringv1.ServiceMonitor:
			c.serviceMonitor(o, t)
		}
	}
	return errors.Join(c.errs...)
}

func (c *checker) find(kind, name string) *Object {
	for i := range c.objs {
		if c.objs[i].Kind == kind && c.objs[i].Meta.Name == name {
			return &c.objs[i]
		}
	}
	return nil
}

// ref checks that a Secret or ConfigMap a pod uses is in the release, or
// declared external (not allowed for a self-contained release).
func (c *checker) ref(o Object, kind, name string, optional bool) {
	if c.find(kind, name) != nil || optional {
		return
	}
	if c.opt.External[name] && !c.opt.SelfContained {
		return
	}
	if c.opt.External[name] {
		c.fail(o, "uses %s %q made outside the release: an example must be self-contained", kind, name)
		return
	}
	c.fail(o, "uses %s %q, neither rendered nor declared external in values (existingSecret / existingConfigMap)", kind, name)
}

func (c *checker) workloadSelector(o Object, sel *metav1.LabelSelector, tmpl map[string]string) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		c.fail(o, "selector %v: empty or invalid (%v)", sel, err)
		return
	}
	if !s.Matches(labels.Set(tmpl)) {
		c.fail(o, "selector %s does not match the pod template's labels %v", s, tmpl)
	}
}

func (c *checker) selected(sel *metav1.LabelSelector) (labels.Selector, []podOf, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, nil, err
	}
	var out []podOf
	for _, p := range pods(c.objs) {
		if s.Matches(labels.Set(p.labels)) {
			out = append(out, p)
		}
	}
	return s, out, nil
}

func (c *checker) selectsPod(o Object, sel *metav1.LabelSelector) {
	s, matched, err := c.selected(sel)
	if err != nil {
		c.fail(o, "selector: %v", err)
		return
	}
	if s.Empty() || len(matched) == 0 {
		c.fail(o, "selector %q selects no pod of the release", s)
	}
}

func (c *checker) service(o Object, svc *corev1.Service) {
	if len(svc.Spec.Selector) == 0 {
		c.fail(o, "has no selector")
		return
	}
	_, matched, _ := c.selected(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
	if len(matched) == 0 {
		c.fail(o, "selector %v selects no pod of the release", svc.Spec.Selector)
		return
	}
	for _, port := range svc.Spec.Ports {
		for _, p := range matched {
			if !hasPort(p.spec, port.TargetPort.String(), port.Port) {
				c.fail(o, "port %s: targetPort %s is no container port of %s", port.Name, port.TargetPort.String(), p.owner.Name())
			}
		}
	}
}

// hasPort: target names a container port, or is its number (an unset
// targetPort is the service port).
func hasPort(spec *corev1.PodSpec, target string, servicePort int32) bool {
	if target == "" || target == "0" {
		target = strconv.Itoa(int(servicePort))
	}
	for _, ct := range spec.Containers {
		for _, cp := range ct.Ports {
			if cp.Name == target || strconv.Itoa(int(cp.ContainerPort)) == target {
				return true
			}
		}
	}
	return false
}

func (c *checker) serviceMonitor(o Object, sm *monitoringv1.ServiceMonitor) {
	s, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || s.Empty() {
		c.fail(o, "selector: empty or invalid (%v)", err)
		return
	}
	var svcs []*corev1.Service
	for _, x := range c.objs {
		if svc, ok := x.Obj.(*corev1.Service); ok && s.Matches(labels.Set(svc.Labels)) {
			svcs = append(svcs, svc)
		}
	}
	if len(svcs) == 0 {
		c.fail(o, "selector %q selects no Service of the release", s)
	}
	for _, ep := range sm.Spec.Endpoints {
		for _, svc := range svcs {
			found := false
			for _, p := range svc.Spec.Ports {
				found = found || p.Name == ep.Port
			}
			if !found {
				c.fail(o, "endpoint port %q is not a port of Service %s", ep.Port, svc.Name)
			}
		}
	}
}

func (c *checker) pod(i int, p podOf) {
	o := p.owner
	vols := map[string]corev1.Volume{}
	for _, v := range p.spec.Volumes {
		vols[v.Name] = v
		switch {
		case v.ConfigMap != nil:
			c.ref(o, "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Optional != nil && *v.ConfigMap.Optional)
		case v.Secret != nil:
			c.ref(o, "Secret", v.Secret.SecretName, v.Secret.Optional != nil && *v.Secret.Optional)
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					c.ref(o, "ConfigMap", src.ConfigMap.Name, src.ConfigMap.Optional != nil && *src.ConfigMap.Optional)
				}
				if src.Secret != nil {
					c.ref(o, "Secret", src.Secret.Name, src.Secret.Optional != nil && *src.Secret.Optional)
				}
			}
		}
	}
	for _, s := range p.spec.ImagePullSecrets {
		c.ref(o, "Secret", s.Name, false)
	}
	podNonRoot := p.spec.SecurityContext != nil && p.spec.SecurityContext.RunAsNonRoot != nil && *p.spec.SecurityContext.RunAsNonRoot
	for j, ct := range allContainers(p.spec) {
		for _, m := range ct.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				c.fail(o, "container %s mounts volume %q, which the pod does not have", ct.Name, m.Name)
			}
		}
		for _, e := range ct.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				c.ref(o, "Secret", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional)
			}
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				c.ref(o, "ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Optional != nil && *e.ValueFrom.ConfigMapKeyRef.Optional)
			}
		}
		for _, e := range ct.EnvFrom {
			if e.SecretRef != nil {
				c.ref(o, "Secret", e.SecretRef.Name, e.SecretRef.Optional != nil && *e.SecretRef.Optional)
			}
			if e.ConfigMapRef != nil {
				c.ref(o, "ConfigMap", e.ConfigMapRef.Name, e.ConfigMapRef.Optional != nil && *e.ConfigMapRef.Optional)
			}
		}
		if !isOurs(ct.Image, c.opt.ImageRepository) {
			continue
		}
		c.hardening(o, ct, podNonRoot)
		prog, ok := c.program(o, ct)
		if !ok {
			continue
		}
		dir := filepath.Join(c.tmp, fmt.Sprintf("pod%d-c%d", i, j))
		args, env, err := c.materialize(o, p, ct, dir)
		if err != nil {
			c.fail(o, "container %s: %v", ct.Name, err)
			continue
		}
		if err := c.bins.CheckConfig(c.ctx, prog, args, env); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%s (%s): container %s: %w", o.Name(), o.Source, ct.Name, err))
		}
		c.probes(o, ct, prog, args)
	}
}

// program is the ckfrelay program a container runs.
func (c *checker) program(o Object, ct corev1.Container) (string, bool) {
	if len(ct.Command) != 1 || !strings.HasPrefix(ct.Command[0], "/") {
		c.fail(o, "container %s: command %q must be one program of the image, e.g. [/relay-producer]", ct.Name, ct.Command)
		return "", false
	}
	prog := strings.TrimPrefix(ct.Command[0], "/")
	if !c.bins.InImage[prog] {
		c.fail(o, "container %s: %s is not a program of the image", ct.Name, ct.Command[0])
		return "", false
	}
	return prog, true
}

func (c *checker) hardening(o Object, ct corev1.Container, podNonRoot bool) {
	if _, tag := splitImage(ct.Image); tag == "" || tag == "latest" {
		c.fail(o, "container %s: image %q must name a tag other than latest", ct.Name, ct.Image)
	}
	sc := ct.SecurityContext
	switch {
	case sc == nil:
		c.fail(o, "container %s: no securityContext", ct.Name)
		return
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		c.fail(o, "container %s: root filesystem is not read-only", ct.Name)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		c.fail(o, "container %s: privilege escalation is not disabled", ct.Name)
	case sc.Privileged != nil && *sc.Privileged:
		c.fail(o, "container %s: privileged", ct.Name)
	case !podNonRoot && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot):
		c.fail(o, "container %s: may run as root (runAsNonRoot)", ct.Name)
	}
	dropsAll := false
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			dropsAll = dropsAll || d == "ALL"
		}
		if len(sc.Capabilities.Add) > 0 {
			c.fail(o, "container %s: adds capabilities %v", ct.Name, sc.Capabilities.Add)
		}
	}
	if !dropsAll {
		c.fail(o, "container %s: does not drop ALL capabilities", ct.Name)
	}
	r := ct.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		c.fail(o, "container %s: needs cpu and memory requests and a memory limit", ct.Name)
	}
	if ct.LivenessProbe == nil || ct.ReadinessProbe == nil {
		c.fail(o, "container %s: needs a liveness and a readiness probe", ct.Name)
	}
}

// materialize writes what the container's mounts hold under dir (the
// release's ConfigMaps and Secrets; an external one as an empty
// directory), and returns the arguments with $(VAR) expanded as the
// kubelet does and every mount path moved under dir, and the container's
// environment.
func (c *checker) materialize(o Object, p podOf, ct corev1.Container, dir string) ([]string, []string, error) {
	vars := map[string]string{}
	var env []string
	for _, e := range ct.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			v = fieldValue(o, e.ValueFrom.FieldRef.FieldPath)
		}
		v = expand(v, vars)
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range p.spec.Volumes {
		vols[v.Name] = v
	}
	mounts := append([]corev1.VolumeMount{}, ct.VolumeMounts...)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].MountPath) > len(mounts[j].MountPath) })
	for _, m := range mounts {
		target := filepath.Join(dir, m.MountPath)
		if err := os.MkdirAll(target, 0o700); err != nil {
			return nil, nil, err
		}
		files := map[string][]byte{}
		v := vols[m.Name]
		switch {
		case v.ConfigMap != nil:
			if x := c.find("ConfigMap", v.ConfigMap.Name); x != nil {
				cm := x.Obj.(*corev1.ConfigMap)
				for k, d := range cm.Data {
					files[k] = []byte(d)
				}
				for k, d := range cm.BinaryData {
					files[k] = d
				}
			}
		case v.Secret != nil:
			if x := c.find("Secret", v.Secret.SecretName); x != nil {
				s := x.Obj.(*corev1.Secret)
				for k, d := range s.Data {
					files[k] = d
				}
				for k, d := range s.StringData {
					files[k] = []byte(d)
				}
			}
		}
		for k, d := range files {
			if m.SubPath != "" {
				if k != m.SubPath {
					continue
				}
				if err := os.WriteFile(target, d, 0o600); err != nil {
					return nil, nil, err
				}
				continue
			}
			if err := os.WriteFile(filepath.Join(target, k), d, 0o600); err != nil {
				return nil, nil, err
			}
		}
	}
	args := make([]string, len(ct.Args))
	for i, a := range ct.Args {
		a = expand(a, vars)
		for _, m := range mounts {
			if a == m.MountPath || strings.Contains(a, m.MountPath+"/") {
				a = strings.ReplaceAll(a, m.MountPath, filepath.Join(dir, m.MountPath))
				break
			}
		}
		args[i] = a
	}
	return args, env, nil
}

// fieldValue stands for a downward-API field of the first pod of o.
func fieldValue(o Object, path string) string {
	switch path {
	case "metadata.name":
		return o.Meta.Name + "-0"
	case "metadata.namespace":
		return "checked"
	case "metadata.labels['apps.kubernetes.io/pod-index']":
		return "0"
	case "status.podIP", "status.hostIP":
		return "10.0.0.1"
	case "spec.nodeName":
		return "node-0"
	}
	return "checked-" + strings.NewReplacer(".", "-", "[", "", "]", "", "'", "", "/", "-").Replace(path)
}

// expand replaces $(VAR) with a defined variable and $$ with $, as the
// kubelet expands a container's command, args and env.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+end+1])
			}
			i += end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// probes: each httpGet probe asks a path the program registers, on the
// container port its --http-addr listens on, not on loopback.
func (c *checker) probes(o Object, ct corev1.Container, prog string, args []string) {
	addr := ""
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--http-addr="); ok {
			addr = v
		} else if (a == "--http-addr" || a == "-http-addr") && i+1 < len(args) {
			addr = args[i+1]
		}
	}
	for name, pr := range map[string]*corev1.Probe{"startup": ct.StartupProbe, "liveness": ct.LivenessProbe, "readiness": ct.ReadinessProbe} {
		if pr == nil {
			continue
		}
		if pr.HTTPGet == nil {
			c.fail(o, "container %s: %s probe is not an HTTP GET", ct.Name, name)
			continue
		}
		if !c.bins.Serves(prog, pr.HTTPGet.Path) {
			c.fail(o, "container %s: %s probe path %q is not served by %s", ct.Name, name, pr.HTTPGet.Path, prog)
		}
		port := -1
		for _, cp := range ct.Ports {
			if cp.Name == pr.HTTPGet.Port.String() || strconv.Itoa(int(cp.ContainerPort)) == pr.HTTPGet.Port.String() {
				port = int(cp.ContainerPort)
			}
		}
		if port < 0 {
			c.fail(o, "container %s: %s probe port %s is no container port", ct.Name, name, pr.HTTPGet.Port.String())
			continue
		}
		if addr == "" {
			c.fail(o, "container %s: %s probe needs --http-addr set (the default listens on loopback)", ct.Name, name)
			continue
		}
		host, p, err := net.SplitHostPort(addr)
		if err != nil {
			c.fail(o, "container %s: --http-addr %q: %v", ct.Name, addr, err)
			continue
		}
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			c.fail(o, "container %s: --http-addr %q listens on loopback: the kubelet's probes cannot reach it", ct.Name, addr)
		}
		if p != strconv.Itoa(port) {
			c.fail(o, "container %s: %s probe port %d, but %s listens on %s", ct.Name, name, port, prog, addr)
		}
	}
}
